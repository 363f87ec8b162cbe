"""service.costs.lora_memory: a LoRA trial's memory estimate keeps the parameter states of its adapters and
head only, and the packing of a LoRA job on a GPU follows (more trials per GPU than full fine-tuning)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.costs import memory
from service.costs.lora_memory import adapter_parameters, trainable_parameters
from service.costs.memory import default_table, estimate_memory_mb
from worker.contract.spec import JobSpec

LORA = {"method": "lora", "r": 8, "alpha": 16, "dropout": 0.0, "target_modules": None}


@pytest.mark.parametrize("model", ["minilm-l6", "bert-base-uncased", "tiny-random-llama", "tiny-random-gpt2"])
def test_lora_scales_the_parameter_states_to_the_trainable_share(model: str) -> None:
    full = estimate_memory_mb(model, "smart", "fp32", 32, 128)
    lora = estimate_memory_mb(model, "smart", "fp32", 32, 128, peft=LORA)
    trainable = lora.entry["lora_trainable_params"]
    share = trainable / (full.entry["weights_mb"] * 2**20 / 4)  # fp32: 4 bytes a parameter
    assert lora.entry["fixed_mb"] == pytest.approx(full.entry["fixed_mb"] * share, rel=0.02)
    assert lora.entry["weights_mb"] == pytest.approx(full.entry["weights_mb"] + trainable * 4 / 2**20)
    assert full.entry["per_token_mb"] == lora.entry["per_token_mb"]  # activations kept
    assert lora.mb < full.mb and lora.allocated_mb > full.entry["weights_mb"]
    assert "LoRA r=8" in lora.notes[-1]


def test_bert_base_lora_counts_its_adapters() -> None:
    """query and value of 12 blocks, r=8, hidden 768: 12 x 2 x 8 x (768 + 768) = 294,912, plus the head."""
    adapters, targets = adapter_parameters(LORA, "bert", 768, 3072, 12)
    assert (adapters, targets) == (294_912, ("query", "value"))
    found = estimate_memory_mb("bert-base-uncased", "smart", "fp32", 32, 128, peft=LORA)
    assert found.entry["lora_trainable_params"] == 294_912 + 768 * 3 + 3
    full = estimate_memory_mb("bert-base-uncased", "smart", "fp32", 32, 128)
    fixed = default_table().entries[("bert-base", "smart", "fp32")]["fixed_mb"]
    assert full.allocated_mb - found.allocated_mb == pytest.approx(
        fixed * (1 - 297_219 / 109_483_778) - 297_219 * 4 / 2**20
    )


def test_named_targets_and_unknown_names_are_costed() -> None:
    dense = {**LORA, "target_modules": ["dense"]}  # BERT: the attention output and both MLP layers
    assert adapter_parameters(dense, "bert", 768, 3072, 1)[0] == 8 * ((768 + 768) + 2 * (768 + 3072))
    unknown = {**LORA, "target_modules": ["my_layer"]}  # the largest: an h x m and an m x h layer
    assert adapter_parameters(unknown, "bert", 768, 3072, 1)[0] == 8 * 2 * (768 + 3072)
    dotted = {**LORA, "target_modules": ["self_attn.q_proj"]}
    assert adapter_parameters(dotted, "llama", 64, 128, 2)[0] == 2 * 8 * (64 + 64)
    assert trainable_parameters(LORA, "unknown-type", 64, 128, 1) == 8 * (64 + 192) + 64 * 3 + 3  # c_attn


def test_a_gpt2_checkpoint_config_gives_its_shape(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12,
                                                      "n_head": 12, "n_inner": None, "n_positions": 1024,
                                                      "vocab_size": 50257}))  # fmt: skip
    shape = memory.model_shape(str(tmp_path))
    assert shape is not None and (shape.hidden, shape.layers, shape.mlp, shape.model_type) == (
        768,
        12,
        3072,
        "gpt2",
    )
    assert 120e6 < shape.params < 130e6  # GPT-2 small: 124M
    found = estimate_memory_mb(str(tmp_path), "smart", "fp32", 8, 128, peft=LORA)
    assert "c_attn" in found.notes[-1]


def test_a_lora_job_packs_more_trials_on_a_gpu() -> None:
    def spec(peft: dict | None) -> JobSpec:
        return JobSpec.model_validate({"task": "rte", "model": "bert-base-uncased", "resources": {"gpus": 0.0625},
                                       "training": {"batch_size": 8, "max_seq_length": 64},
                                       **({"peft": peft} if peft else {})})  # fmt: skip

    full = memory.pin(spec(None), gpu_kind="NVIDIA A10G")
    lora = memory.pin(spec(LORA), gpu_kind="NVIDIA A10G")
    assert lora.resources.gpu_memory_mb is not None and full.resources.gpu_memory_mb is not None
    assert lora.resources.gpu_memory_mb < full.resources.gpu_memory_mb
    assert lora.resources.gpus < full.resources.gpus  # a smaller share of the GPU: more trials on it
