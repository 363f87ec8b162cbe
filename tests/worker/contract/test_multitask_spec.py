"""The spec's `multitask` block: validation naming the field, the plan, and what it does to the grid."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from worker.contract.multitask import MultitaskPlan
from worker.contract.spec import JobSpec


def _spec(**fields: Any) -> JobSpec:
    return JobSpec.model_validate({"task": ["rte", "stsb"], "multitask": {}, **fields})


@pytest.mark.parametrize("task", ["rte", ["rte"], ["rte", "RTE"]])
def test_fewer_than_two_distinct_tasks_are_refused(task: Any) -> None:
    with pytest.raises(ValidationError, match=r"multitask: needs a `task` list of at least 2"):
        _spec(task=task)


def test_unknown_sampling_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError) as info:
        _spec(multitask={"sampling": "temperature"})
    assert info.value.errors()[0]["loc"] == ("multitask", "sampling")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"multitask": {"finetune_epochs": -1}}, "finetune_epochs"),
        ({"multitask": {"rounds": 2}}, "rounds"),
        ({"search": {"asha": {}}}, "multitask: search.asha"),
        ({"training": {"workers": 2}, "resources": {"cpus": 2}}, "multitask: training.workers"),
        ({"training": {"validation_fraction": 0.1}}, "multitask: training.validation_fraction"),
    ],
)
def test_other_mistakes_name_the_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _spec(**fields)


def test_one_trial_per_seed_trains_every_task() -> None:
    spec = _spec(task=["rte", "mrpc", "stsb"], multitask={"sampling": "proportional", "finetune_epochs": 2},
                 seeds=[1, 2])  # fmt: skip
    assert [t["task"] for t in spec.trials()] == ["rte", "rte"]  # the first task; the plan holds them all
    assert spec.multitask_plan() == MultitaskPlan(("rte", "mrpc", "stsb"), "proportional", 2)
    assert JobSpec.model_validate_json(spec.canonical_json()) == spec


def test_without_the_block_a_list_is_still_one_trial_per_task() -> None:
    spec = JobSpec.model_validate({"task": ["rte", "stsb"]})
    assert [t["task"] for t in spec.trials()] == ["rte", "stsb"] and spec.multitask_plan() is None
    assert "multitask" not in spec.canonical_json()  # older specs keep their hash
