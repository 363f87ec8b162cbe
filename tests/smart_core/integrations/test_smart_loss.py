"""SmartLoss (smart_core.integrations.loss) on its own: a one-label head is read as regression, the teacher's
schedule is planned over the run's updates, the diagnostics measure at the head, and a checkpoint of its
state (the teacher θ̃ and the step count) restores both in a fresh loss."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from smart_core.config import MethodConfig
from smart_core.integrations.loss import SmartLoss
from tests.smart_core.integrations.hf_setup import EXAMPLES, WIDTH, fresh_model, random_examples, train_config
from worker.training.batching import collate


def _batch(regression: bool = False) -> dict[str, torch.Tensor]:
    batch = collate(random_examples(), list(range(EXAMPLES)), 0, WIDTH)
    if regression:  # STS-B-like similarity scores in [0, 5]
        batch["labels"] = torch.linspace(0.0, 5.0, EXAMPLES)
    return batch


def _trained(method: MethodConfig, updates: int) -> SmartLoss:
    """A SmartLoss after `updates` optimiser steps of plain SGD (the teacher moved `updates` times)."""
    torch.manual_seed(0)
    model = fresh_model(train_config(dropout=0.0))
    smart = SmartLoss(model, method, planned_updates=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(updates):
        loss, _parts = smart(_batch())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        smart.after_update()
    return smart


def test_a_one_label_head_is_read_as_regression() -> None:
    """regression=None follows the head: num_labels 1 gives the squared error on the (B,) outputs."""
    model = fresh_model(train_config(task="stsb", dropout=0.0))
    model.eval()
    smart = SmartLoss(model, MethodConfig(), planned_updates=1)
    batch = _batch(regression=True)
    _loss, parts = smart(batch)
    with torch.no_grad():
        outputs = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, 0]
    torch.testing.assert_close(parts["task_loss"], F.mse_loss(outputs, batch["labels"]), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="num_labels"):
        SmartLoss(model, MethodConfig(), planned_updates=1, regression=False)


def test_the_teacher_schedule_is_planned_over_the_runs_updates() -> None:
    method = MethodConfig()
    smart = SmartLoss(fresh_model(train_config()), method, planned_updates=100)
    assert smart.objective.reference is not None
    assert smart.objective.reference.switch_after == math.ceil(method.beta_switch * 100)


def test_the_diagnostics_measure_r_s_against_the_task_at_the_head() -> None:
    smart = SmartLoss(fresh_model(train_config(dropout=0.0)), MethodConfig(), planned_updates=1)
    _loss, parts = smart(_batch())  # the first step is a diagnostics step
    assert parts["grad_ratio_rs"] > 0


def test_the_labels_are_required() -> None:
    smart = SmartLoss(fresh_model(train_config()), MethodConfig(), planned_updates=1)
    batch = _batch()
    batch.pop("labels")
    with pytest.raises(ValueError, match="labels"):
        smart(batch)


@pytest.mark.parametrize("teacher", [True, False])
def test_a_checkpoint_restores_the_teacher_and_the_step_count(teacher: bool) -> None:
    method = MethodConfig() if teacher else MethodConfig(mu=0.0)  # mu 0: R_s alone, no teacher
    smart = _trained(method, updates=3)
    state = smart.state_dict()
    assert state["steps"] == 3 and (state["reference"] is not None) == teacher

    resumed = _trained(method, updates=0)  # θ̃ = θ₀, no steps taken
    start = resumed.objective.reference
    initial = [t.clone() for t in start.shadow] if start is not None else []
    resumed.load_state_dict(state)
    assert resumed.objective.steps == 3
    reference, restored = smart.objective.reference, resumed.objective.reference
    assert (restored is not None) == teacher
    if reference is not None and restored is not None:
        assert restored.updates_done == reference.updates_done == 3
        for ours, theirs in zip(restored.shadow, reference.shadow, strict=True):
            assert torch.equal(ours, theirs)
        assert any(not torch.equal(a, b) for a, b in zip(restored.shadow, initial, strict=True))  # it moved


def test_a_checkpoint_of_another_teacher_setting_is_refused() -> None:
    with_teacher = _trained(MethodConfig(), updates=1)
    without = _trained(MethodConfig(mu=0.0), updates=1)
    with pytest.raises(ValueError, match="has a teacher"):
        without.load_state_dict(with_teacher.state_dict())
    with pytest.raises(ValueError, match="has no teacher"):
        with_teacher.load_state_dict(without.state_dict())
    assert with_teacher.objective.steps == without.objective.steps == 1  # nothing half-restored
