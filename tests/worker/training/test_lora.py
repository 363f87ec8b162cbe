"""LoRA trials (the spec's `peft` block): the base is frozen, SMART trains the adapters and the head, the
momentum teacher holds those only, and checkpoints keep the adapter + head (merged for transformers)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForSequenceClassification

from service.costs.lora_memory import trainable_parameters
from service.costs.memory import model_shape
from tests.worker.training.decoder_setup import DECODERS, LORA, session_for, train_config
from worker.contract.lora import LoraSpec
from worker.training.batching import collate
from worker.training.finetune import save_checkpoint
from worker.training.loop import train_step
from worker.training.lora import ADAPTER_DIR, trainable_counts
from worker.training.session import task_model

pytestmark = pytest.mark.usefixtures("no_network")


def _lora_shapes(name: str) -> int:
    """Adapter + head parameters of LORA (r=4) on the tiny decoders: hidden 32, 2 layers, 2 labels."""
    r, hidden, layers, head = 4, 32, 2, 32 * 2
    if name == "tiny-random-gpt2":  # c_attn: 32 -> 96 (q, k, v fused)
        return layers * r * (hidden + 3 * hidden) + head
    kv = hidden // 4 * 2  # 4 heads of 8, 2 key-value heads: v_proj 32 -> 16
    return layers * (r * (hidden + hidden) + r * (hidden + kv)) + head


@pytest.mark.parametrize("name", [*DECODERS, "tiny-random"])
def test_a_smart_step_trains_only_the_adapters_and_the_head(name: str) -> None:
    session = session_for(train_config(name, peft=LORA))
    assert isinstance(session.model, PeftModel)
    trainable, total = trainable_counts(session.model)
    if name != "tiny-random":
        assert trainable == _lora_shapes(name)
    assert trainable < total / 100
    before = {n: p.detach().clone() for n, p in session.model.named_parameters()}
    parts = train_step(session, list(range(8)))
    assert torch.isfinite(parts["loss"]) and float(parts["r_s"]) > 0
    changed = {n for n, p in session.model.named_parameters() if not torch.equal(p, before[n])}
    grads = {n for n, p in session.model.named_parameters() if p.requires_grad}
    assert changed and changed <= grads  # no frozen base weight moved
    assert any("lora_B" in n for n in changed) and any("modules_to_save" in n for n in changed)


@pytest.mark.parametrize("name", DECODERS)
def test_the_teacher_holds_the_trainable_parameters_only(name: str) -> None:
    full = session_for(train_config(name))
    lora = session_for(train_config(name, peft=LORA))
    assert full.objective.reference is not None and lora.objective.reference is not None
    teacher = sum(t.numel() for t in lora.objective.reference.shadow)
    assert teacher == trainable_counts(lora.model)[0] == _lora_shapes(name)
    teacher_bytes = sum(t.numel() * t.element_size() for t in lora.objective.reference.shadow)
    full_bytes = sum(t.numel() * t.element_size() for t in full.objective.reference.shadow)
    assert teacher_bytes * 100 < full_bytes  # ~1 kB of adapters against ~4 MB for the whole model
    # The optimiser's state likewise: two moments per trainable parameter after a step.
    train_step(lora, list(range(8)))
    moments = sum(v.numel() for s in lora.optimizer.state.values() for k, v in s.items() if k != "step")
    assert moments == 2 * teacher


def test_the_trial_checkpoint_keeps_the_adapter_and_head_and_resumes() -> None:
    config = train_config("tiny-random-llama", peft=LORA)
    session = session_for(config)
    train_step(session, list(range(8)))
    state = session.state_dict()
    assert set(state["model"]) == {n for n, p in session.model.named_parameters() if p.requires_grad}
    resumed = session_for(config)  # the frozen base rebuilt from the name and seed
    resumed.load_state_dict(state)
    for (n, a), b in zip(
        session.model.state_dict().items(), resumed.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), n
    other = session_for(train_config("tiny-random-llama", peft={**LORA, "r": 2}))
    with pytest.raises(ValueError, match="do not match this LoRA model"):
        other.load_state_dict(state)


@pytest.mark.parametrize("name", ["tiny-random-gpt2", "tiny-random-qwen2"])
def test_the_best_model_is_saved_merged_with_its_adapter_beside(name: str, tmp_path: Path) -> None:
    config = train_config(name, peft=LORA)
    session = session_for(config)
    for _ in range(2):
        train_step(session, list(range(8)))
    folder = save_checkpoint(session, tmp_path / "best")
    session.model.eval()
    batch = collate(session.train, list(range(8)), session.pad_id)
    batch.pop("labels")
    with torch.no_grad():
        expected = session.adapter.forward(batch)
        merged = AutoModelForSequenceClassification.from_pretrained(folder).eval()
        assert not any("lora" in key for key in merged.state_dict())
        got = merged(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
        base, _ = task_model(train_config(name), session.task)  # the same base weights (name + seed)
        adapter = PeftModel.from_pretrained(base, folder / ADAPTER_DIR).eval()
        again = adapter(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        torch.testing.assert_close(again, expected, rtol=0, atol=1e-5)
    assert (folder / ADAPTER_DIR / "adapter_config.json").is_file()


def test_unknown_target_modules_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"^peft\.target_modules: .*nope"):
        session_for(train_config("tiny-random-llama", peft={**LORA, "target_modules": ["nope"]}))


def test_the_spec_block_is_validated_naming_the_field() -> None:
    assert LoraSpec(r=8, alpha=16).scaling() == 2.0
    for bad, field in (({"r": 0}, "peft.r"), ({"dropout": 1.0}, "peft.dropout"), ({"rank": 4}, "peft.rank"),
                       ({"target_modules": ["q proj"]}, "peft.target_modules"), ({"method": "ia3"}, "peft.method")):  # fmt: skip
        with pytest.raises(ValueError, match=rf"^invalid value for {field}"):
            train_config("tiny-random", peft=bad)


@pytest.mark.parametrize("name", DECODERS)
def test_the_memory_estimate_counts_at_least_the_real_trainable_parameters(name: str) -> None:
    """The control plane's count (service.costs.lora_memory, from the shape alone) against the model's."""
    actual = trainable_counts(session_for(train_config(name, peft=LORA)).model)[0]
    shape = model_shape(name)
    assert shape is not None
    estimated = trainable_parameters(LORA, shape.model_type, shape.hidden, shape.mlp, shape.layers)
    assert actual <= estimated <= 1.5 * actual
