""" "Did you mean" for an unknown spec field: a field of that name elsewhere first, else a near miss."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from worker.contract.hints import did_you_mean, field_paths, suggest
from worker.contract.spec import JobSpec


@pytest.mark.parametrize(
    ("loc", "meant"),
    [
        (("training", "epsilon"), "method_params.epsilon"),  # the case
        (("epsilon",), "method_params.epsilon"),
        (("method_params", "epochs"), "training.epochs"),
        (("training", "method"), "method"),
        (("training", "lerning_rate"), "training.learning_rate"),
        (("method_params", "lamda_s"), "method_params.lambda_s"),
        (("resources", "gpu"), "resources.gpus"),
        (("limits", "max_concurent_trials"), "limits.max_concurrent_trials"),
        (("seed",), "seeds"),
        (("training", "lamda_s"), "method_params.lambda_s"),  # a near miss of a field in another block
        (("training", "zzz"), None),
    ],
)
def test_suggest(loc: tuple[str, ...], meant: str | None) -> None:
    assert suggest(loc) == meant


def test_every_block_and_method_field_is_a_place() -> None:
    paths = set(field_paths())
    assert {"training.epochs", "search.asha.grace_period", "resources.gpus", "method_params.epsilon"} <= paths
    assert did_you_mean(("training", "zzz")) == ""


def test_an_unknown_method_parameter_names_where_it_belongs() -> None:
    with pytest.raises(ValidationError, match=r"epochs; did you mean `training\.epochs`\? known: "):
        JobSpec.model_validate({"task": "rte", "method_params": {"epochs": 3}}, strict=True)
