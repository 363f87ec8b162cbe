"""A custom-function job's spec (issue 33): the entrypoint's format, its own axes (allowed only with
`function`), how its trials are counted and crossed, and what it refuses."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from worker.contract.function import free_grid, own_values
from worker.contract.search import Axis
from worker.contract.spec import JobSpec

ENTRY = "examples.custom_function.linear_probe:train"


def spec(**changes: Any) -> JobSpec:
    document: dict[str, Any] = {"task": "sst2", "function": {"entrypoint": ENTRY, "metric": "accuracy"}}
    return JobSpec.model_validate(document | changes)


@pytest.mark.parametrize("entrypoint", ["pkg.mod:fn", "mod:_f", "a.b.c:Train2"])
def test_an_entrypoint_is_a_dotted_module_and_one_attribute(entrypoint: str) -> None:
    assert spec(function={"entrypoint": entrypoint}).function is not None


@pytest.mark.parametrize(
    "entrypoint", ["pkg.mod", "pkg.mod:fn()", "pkg/mod:fn", "mod:a.b", ":fn", "os:system; rm", ""]
)
def test_a_malformed_entrypoint_is_refused_naming_the_field(entrypoint: str) -> None:
    with pytest.raises(ValidationError) as info:
        spec(function={"entrypoint": entrypoint})
    assert info.value.errors()[0]["loc"][:2] == ("function", "entrypoint")


def test_own_axes_are_crossed_with_the_trial_fields_and_counted() -> None:
    job = spec(
        search_space={"axes": {"features": {"values": [8, 16, 32]}, "learning_rate": {"values": [0.1, 0.5]}}},
        seeds=[1, 2],
    )
    assert job.function_axes().keys() == {"features"} and "features" not in job.grid_axes()
    assert len(job.trials()) == 4 and job.function_grid() == [{"features": v} for v in (8, 16, 32)]
    assert job.trial_count() == 12


def test_own_axes_sampled_under_random_search() -> None:
    job = spec(
        search={"algorithm": "random", "num_samples": 3},
        search_space={
            "axes": {
                "width": {"type": "choice", "values": [1, 2]},
                "l2": {"type": "uniform", "low": 0, "high": 1},
            }
        },
    )
    assert job.function_grid() == [{}] and set(job.function_sampled()) == {"width", "l2"}
    assert own_values({"function": {"a": 1}, "function_sampled": {"b": 2}}) == {"a": 1, "b": 2}


def test_a_job_without_a_function_cannot_sweep_keys_of_its_own() -> None:
    with pytest.raises(ValidationError) as info:
        JobSpec.model_validate({"task": "rte", "search_space": {"axes": {"features": {"values": [1]}}}})
    error = info.value.errors()[0]
    assert error["loc"] == ("search_space", "axes") and "cannot sweep features" in error["msg"]
    assert "custom-function job" in error["msg"]


@pytest.mark.parametrize("name", ["num_threads", "model", "data", "_private", "not-an-identifier"])
def test_a_function_job_still_cannot_sweep_fixed_fields_or_odd_names(name: str) -> None:
    with pytest.raises(ValidationError, match="cannot sweep"):
        spec(search_space={"axes": {name: {"values": [1]}}})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"search": {"algorithm": "optuna"}, "search_space": {"axes": {"learning_rate": {"type": "uniform", "low": 0.1, "high": 0.5}}}}, "optuna"),
        ({"peft": {"method": "lora", "r": 4, "alpha": 8, "target_modules": ["q_proj"]}}, "peft"),
        ({"task": ["rte", "mrpc"], "multitask": {}}, "multitask"),
    ],
)  # fmt: skip
def test_what_a_function_job_refuses(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        spec(**changes)


def test_an_unset_function_leaves_older_specs_hash_alone() -> None:
    plain = JobSpec.model_validate({"task": "rte"})
    assert '"function"' not in plain.canonical_json()
    assert '"function"' in spec().canonical_json() and spec().spec_hash() != plain.spec_hash()


def test_the_free_grid_walks_grid_axes_and_choices_only_under_the_grid_algorithm() -> None:
    axes = {"a": Axis(values=[1, 2]), "b": Axis(type="choice", values=["x", "y"])}
    assert len(free_grid(axes, "grid")) == 4
    assert free_grid(axes, "random") == [{"a": 1}, {"a": 2}]
