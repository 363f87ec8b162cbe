"""One optimiser step of AcceleratedSmart (smart_core.integrations.accelerated) in an accelerate loop on one
process equals one `worker.training.loop.train_step` on the same batch and seed: weights and teacher, in fp32
and under bf16 (the precision plan, not accelerate's autocast around the forward). In-process: unit tier."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState

from smart_core.integrations import accelerated
from smart_core.integrations.accelerated import AcceleratedSmart
from tests.smart_core.integrations.hf_setup import (
    EXAMPLES,
    WIDTH,
    fresh_model,
    parameters,
    project_session,
    random_examples,
    train_config,
)
from worker.training.batching import collate
from worker.training.loop import train_step
from worker.training.session import linear_schedule, make_optimizer

STEP_SEED = 4321


@pytest.fixture(autouse=True)
def fresh_accelerator_state() -> Iterator[None]:
    # before too: a test of another module on the same xdist worker (a Trainer's bf16 TrainingArguments)
    # may have left a state whose precision this test's Accelerator may not change
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)  # the next Accelerator reads its own settings


@pytest.mark.parametrize(
    ("params", "precision"),
    [
        ({}, "fp32"),
        ({"epsilon": 1e-3}, "bf16"),  # the exact step leaves autocast for fp32 (rs_arithmetic fp32)
        ({"rs_dropout": "off", "rs_arithmetic": "auto"}, "bf16"),  # the linearised R_s at bf16
    ],
)
def test_one_accelerate_step_is_one_step_of_the_project_loop(params: dict[str, Any], precision: str) -> None:
    config = train_config(method="smart", method_params=params, precision=precision, dropout=0.1)
    session = project_session(config)
    session.model.train()  # as iterate_epoch does
    torch.manual_seed(STEP_SEED)
    train_step(session, list(range(EXAMPLES)))
    assert session.objective.reference is not None

    accelerator = Accelerator(cpu=True, mixed_precision="bf16" if precision == "bf16" else "no")
    model = fresh_model(config)
    model.train()
    optimizer = make_optimizer(config, [p for p in model.parameters() if p.requires_grad])
    scheduler = linear_schedule(optimizer, 1, config.warmup_fraction)
    model, optimizer = accelerator.prepare(model, optimizer)
    smart = AcceleratedSmart(accelerator, model, config.method_config(), planned_updates=1)
    batch = collate(random_examples(), list(range(EXAMPLES)), 0, WIDTH)
    torch.manual_seed(STEP_SEED)
    smart.backward(batch)
    accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    smart.after_update()

    ours, theirs = parameters(smart.model), parameters(session.model)
    for name, value in theirs.items():
        torch.testing.assert_close(ours[name], value, rtol=1e-5, atol=1e-6, msg=name)
    reference = smart.smart.objective.reference
    assert reference is not None and reference.updates_done == 1
    for a, b in zip(reference.shadow, session.objective.reference.shadow, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_the_regression_and_generator_arguments_reach_the_loss() -> None:
    """`generator`: R_s's noise comes from it (the global generator is seeded the same for both steps, so
    only the generators' seeds differ); `regression`: a regression loss on a two-label head is refused."""
    config = train_config(method="smart-rs-only", dropout=0.0)
    batch = collate(random_examples(), list(range(EXAMPLES)), 0, WIDTH)
    gradients = []
    for seed in (1, 2):
        accelerator = Accelerator(cpu=True)
        model = accelerator.prepare(fresh_model(config))
        smart = AcceleratedSmart(
            accelerator, model, config.method_config(), planned_updates=1,
            generator=torch.Generator().manual_seed(seed),
        )  # fmt: skip
        torch.manual_seed(STEP_SEED)
        smart.backward(batch)
        smart.after_update()  # counts the update (no teacher to move)
        gradients.append([p.grad.clone() for p in smart.trainable if p.grad is not None])
    assert any(not torch.equal(a, b) for a, b in zip(*gradients, strict=True))
    resumed = AcceleratedSmart(accelerator, model, config.method_config(), planned_updates=1)
    resumed.load_state_dict(
        smart.state_dict()
    )  # a checkpoint's SMART state: the step count (no teacher here)
    assert resumed.smart.objective.steps == smart.smart.objective.steps == 1
    with pytest.raises(ValueError, match="num_labels=1"):
        AcceleratedSmart(accelerator, model, config.method_config(), planned_updates=1, regression=True)


def test_the_gradient_sum_fills_a_missing_gradient_with_zeros(monkeypatch: pytest.MonkeyPatch) -> None:
    """The all-reduce sums one flat buffer of every trainable parameter's gradient; a parameter without a
    gradient on this process contributes zeros (another process may have one) and gets the sum back. The
    collective itself is the two-process test's (test_accelerated.py); here it is the identity of one."""
    monkeypatch.setattr(accelerated.dist, "all_reduce", lambda tensor, op: None)
    config = train_config(dropout=0.0)
    accelerator = Accelerator(cpu=True)
    smart = AcceleratedSmart(accelerator, accelerator.prepare(fresh_model(config)), planned_updates=1)
    for index, param in enumerate(smart.trainable):
        param.grad = None if index == 0 else torch.full_like(param, float(index))
    smart._sum_gradients()
    for index, param in enumerate(smart.trainable):
        assert param.grad is not None and torch.equal(param.grad, torch.full_like(param, float(index)))
