"""SmartTrainer (smart_core.integrations.trainer) against the project's own loop: one optimiser step through a
plain `transformers.Trainer` + SMART gives the weights and teacher of one `worker.training.loop.train_step` on
the same batch and seed; gradient accumulation gives the whole batch's update; the teacher moves once per
optimiser step; bf16 runs the project's precision plan, not accelerate's autocast."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import TrainerCallback, TrainingArguments

from smart_core.integrations.trainer import SmartTrainer
from tests.smart_core.integrations.hf_setup import (
    EXAMPLES,
    WIDTH,
    collator,
    fresh_model,
    parameters,
    project_session,
    random_examples,
    rows,
    train_config,
)
from worker.training.batching import collate
from worker.training.loop import train_step
from worker.training.session import linear_schedule, make_optimizer

STEP_SEED = 1234  # the global generator's state when the step starts: dropout masks and R_s's noise


class _SeedEachStep(TrainerCallback):
    """Puts torch's global generator where the project's side has it when the optimiser step begins."""

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        torch.manual_seed(STEP_SEED)


def _trainer(
    tmp_path: Path,
    config: Any,
    *,
    micro_batch: int = EXAMPLES,
    smart_arguments: dict[str, Any] | None = None,
    **arguments: Any,
) -> SmartTrainer:
    """A SmartTrainer with the project's optimiser and schedule, over the project's examples in order;
    `arguments` are TrainingArguments', `smart_arguments` the trainer's (regression, generator, eval_dataset)."""
    smart_arguments = smart_arguments or {}
    model = fresh_model(config)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(config, trainable)
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=micro_batch, use_cpu=True,
        report_to="none", save_strategy="no", remove_unused_columns=False, train_sampling_strategy="sequential",
        max_grad_norm=config.max_grad_norm, seed=config.seed, **{"max_steps": 1, "logging_steps": 1, **arguments},
    )  # fmt: skip
    data = random_examples()
    return SmartTrainer(
        model,  # positionally, as `Trainer` takes them
        args,
        train_dataset=rows(data),
        data_collator=collator(data, 0),
        optimizers=(optimizer, linear_schedule(optimizer, 1, config.warmup_fraction)),
        callbacks=[_SeedEachStep()],
        method=config.method_config(),
        **smart_arguments,
    )


def _project_step(config: Any) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    session = project_session(config)
    session.model.train()  # as worker.training.loop.iterate_epoch does before its steps
    torch.manual_seed(STEP_SEED)
    train_step(session, list(range(EXAMPLES)))
    reference = session.objective.reference
    return parameters(session.model), list(reference.shadow) if reference is not None else []


def _assert_same(trainer: SmartTrainer, weights: dict[str, torch.Tensor], shadow: list[torch.Tensor]) -> None:
    after = parameters(trainer.model)
    assert after.keys() == weights.keys()
    for name, value in weights.items():
        torch.testing.assert_close(after[name], value, rtol=1e-5, atol=1e-6, msg=name)
    assert trainer.smart is not None
    reference = trainer.smart.objective.reference
    assert (reference is not None) == bool(shadow)
    for ours, theirs in zip(reference.shadow if reference else [], shadow, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("method", "params", "precision"),
    [
        ("smart", {}, "fp32"),  # the paper's SMART: independent R_s dropout, eval-mode teacher
        ("smart", {"rs_dropout": "shared", "teacher_dropout": "shared"}, "fp32"),
        (
            "smart",
            {"epsilon": 1e-3},
            "bf16",
        ),  # autocast; the exact step leaves it for fp32 (rs_arithmetic fp32)
        ("smart", {"rs_dropout": "off", "rs_arithmetic": "auto"}, "bf16"),  # the linearised R_s under bf16
        ("r3f", {}, "fp32"),
    ],
)
def test_one_trainer_step_is_one_step_of_the_project_loop(
    tmp_path: Path, method: str, params: dict[str, Any], precision: str
) -> None:
    config = train_config(method=method, method_params=params, precision=precision, dropout=0.1)
    weights, shadow = _project_step(config)
    trainer = _trainer(tmp_path, config, bf16=precision == "bf16")
    before = parameters(trainer.model)
    trainer.train()
    assert any(not torch.equal(before[k], v) for k, v in weights.items())  # the step moved the weights
    _assert_same(trainer, weights, shadow)
    logged = trainer.state.log_history[0]
    assert logged["smart/r_s"] > 0 and "smart/task_loss" in logged


@pytest.mark.parametrize("method", ["smart", "smart-rs-only"])
def test_two_accumulated_half_batches_make_the_whole_batch_step(tmp_path: Path, method: str) -> None:
    """Exact without dropout: R_s's noise for the two halves is the first and second half of the whole
    batch's draw (torch draws normals in blocks of 16 from one stream; every (4, 16, H) block is a multiple),
    so the micro-batches see the noise the whole batch sees. With dropout the masks of two half batches are
    other draws than the whole batch's: equal in distribution only, like the noise of a different seed."""
    config = train_config(method=method, dropout=0.0)
    weights, shadow = _project_step(config)
    whole = _trainer(tmp_path, config)
    whole.train()
    trainer = _trainer(tmp_path, config, micro_batch=EXAMPLES // 2, gradient_accumulation_steps=2)
    trainer.train()
    _assert_same(trainer, weights, shadow)
    # Adam's first update barely sees the gradient's scale: the loss and gradient norm show the weighting.
    for key in ("loss", "grad_norm", "smart/task_loss"):
        assert trainer.state.log_history[0][key] == pytest.approx(whole.state.log_history[0][key], rel=1e-5)
    assert trainer.smart is not None and trainer.smart.objective.steps == 1  # one teacher move, not two
    reference = trainer.smart.objective.reference
    assert reference is None or reference.updates_done == 1


def test_bf16_steps_leave_accelerate_autocast_for_the_precision_plan(tmp_path: Path) -> None:
    """Under bf16 the SMART step runs at the plan's precision: the fp32 passes are not re-cast to bf16 by
    accelerate's wrapper around the model's forward, and that wrapper is gone from the model afterwards."""
    config = train_config(method="smart", precision="bf16", dropout=0.0)
    trainer = _trainer(tmp_path, config, bf16=True)
    trainer.train()
    assert "_original_forward" not in vars(trainer.model)
    logged = trainer.state.log_history[0]
    assert logged["smart/fp32_step"] == 1.0


def test_the_step_autocasts_at_the_dtype_the_arguments_ask_for(tmp_path: Path) -> None:
    """fp32 arguments: no autocast at all; bf16 / fp16: torch.autocast at that dtype (autocast's own default
    dtype is fp16 on CUDA, so it must be named), with the weight-cast cache as the caller asks."""
    trainer = _trainer(tmp_path, train_config())
    assert not isinstance(trainer.autocast_smart_context_manager(), torch.autocast)
    for flag, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        trainer.args.bf16, trainer.args.fp16 = flag == "bf16", flag == "fp16"
        default, uncached = (
            trainer.autocast_smart_context_manager(),
            trainer.autocast_smart_context_manager(False),
        )
        assert isinstance(default, torch.autocast) and isinstance(uncached, torch.autocast)
        assert default.fast_dtype == uncached.fast_dtype == dtype
        assert default._cache_enabled is True and uncached._cache_enabled is False


def test_the_regression_and_generator_arguments_reach_the_loss(tmp_path: Path) -> None:
    """`generator`: R_s's noise comes from it (the global generator is reseeded the same for both runs, so
    only the generators' seeds differ); `regression`: a regression loss on a two-label head is refused."""
    config = train_config(method="smart-rs-only", dropout=0.0)
    weights = []
    for seed in (1, 2):
        trainer = _trainer(
            tmp_path, config, smart_arguments={"generator": torch.Generator().manual_seed(seed)}
        )
        trainer.train()
        weights.append(parameters(trainer.model))
    assert any(not torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    trainer = _trainer(tmp_path, config, smart_arguments={"regression": True})
    with pytest.raises(ValueError, match="num_labels=1"):
        trainer.train()


def test_evaluation_keeps_the_models_loss_and_the_logs_average_the_steps(tmp_path: Path) -> None:
    """Two steps logged together, with an evaluation after the first: the evaluation's loss is the model's
    own cross-entropy (no SMART terms, no components taken from the training log), and the training log's
    components are the two steps' mean, as two logs of one step each show them."""
    config = train_config(method="smart", dropout=0.0)
    each = _trainer(tmp_path, config, max_steps=2)
    each.train()
    first, second = (log for log in each.state.log_history if "smart/task_loss" in log)
    data = random_examples()
    trainer = _trainer(
        tmp_path, config, smart_arguments={"eval_dataset": rows(data)}, max_steps=2, logging_steps=2,
        eval_strategy="steps", eval_steps=1, per_device_eval_batch_size=EXAMPLES,
    )  # fmt: skip
    trainer.train()
    evaluations = [log for log in trainer.state.log_history if "eval_loss" in log]
    trained = [log for log in trainer.state.log_history if "loss" in log]
    assert len(evaluations) == 2 and len(trained) == 1
    assert not any(key.startswith("smart/") for log in evaluations for key in log)
    for key in ("smart/task_loss", "smart/r_s"):
        assert trained[0][key] == pytest.approx((first[key] + second[key]) / 2, rel=1e-5)
    model = trainer.model.eval()
    batch = collate(data, list(range(EXAMPLES)), 0, WIDTH)
    with torch.no_grad():
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
    own = torch.nn.functional.cross_entropy(logits, batch["labels"])
    assert evaluations[-1]["eval_loss"] == pytest.approx(float(own), rel=1e-5)


def test_a_direct_loss_call_on_a_model_in_eval_mode_is_the_models_own_loss(tmp_path: Path) -> None:
    """Custom evaluation loops call `compute_loss(model, inputs)` without `return_outputs`: with the model in
    eval mode that is the model's cross-entropy, not SMART's training loss (R_s, D_Breg), even once the
    SmartLoss exists."""
    config = train_config(method="smart", dropout=0.0)
    trainer = _trainer(tmp_path, config)
    trainer.train()
    assert trainer.smart is not None
    batch = collate(random_examples(), list(range(EXAMPLES)), 0, WIDTH)
    model = trainer.model.eval()
    with torch.no_grad():
        loss = trainer.compute_loss(model, dict(batch))
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
    own = torch.nn.functional.cross_entropy(logits, batch["labels"])
    assert float(loss) == pytest.approx(float(own), rel=1e-5)


def test_more_than_one_process_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = train_config()
    monkeypatch.setattr(TrainingArguments, "world_size", property(lambda _self: 2))
    with pytest.raises(ValueError, match="one process"):
        _trainer(tmp_path, config)


@pytest.mark.slow  # inductor compiles the tiny encoder: tens of seconds on 2 cores
def test_torch_compile_compiles_the_encoder_and_matches_eager(tmp_path: Path) -> None:
    config = train_config(method="smart", dropout=0.0)
    weights, shadow = _project_step(config)
    trainer = _trainer(tmp_path, config, torch_compile=True)
    trainer.train()
    encoder = trainer.model.base_model.encoder  # type: ignore[union-attr]
    assert encoder._compiled_call_impl is not None  # compiled in place; embeddings stay eager
    assert trainer.model_wrapped is trainer.model  # accelerate did not compile the whole model around it
    for name, value in parameters(trainer.model).items():
        torch.testing.assert_close(value, weights[name], rtol=1e-4, atol=1e-5, msg=name)
    assert trainer.smart is not None and trainer.smart.objective.reference is not None
    for ours, theirs in zip(trainer.smart.objective.reference.shadow, shadow, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model", ["tiny-random-llama", "tiny-random-gpt2"])
def test_a_lora_decoder_step_through_the_trainer_is_one_step_of_the_project_loop(
    tmp_path: Path, model: str
) -> None:
    """A `peft` model in a SmartTrainer: the adapters and the head move as in the project's loop, the frozen
    base does not, and the teacher holds the trainable parameters only."""
    config = train_config(model=model, peft={"method": "lora", "r": 4, "alpha": 8}, dropout=0.1)
    weights, shadow = _project_step(config)
    trainer = _trainer(tmp_path, config)
    before = parameters(trainer.model)
    trainer.train()
    _assert_same(trainer, weights, shadow)
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    moved = {n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])}
    assert moved and moved <= trainable and any("lora_B" in n for n in moved)
    assert sum(s.numel() for s in shadow) == sum(
        p.numel() for n, p in trainer.model.named_parameters() if n in trainable
    )
