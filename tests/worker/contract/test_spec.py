"""The job spec (no Ray, no torch): validation naming fields, canonical form and hash, presets, dedup."""

from __future__ import annotations

import json
from typing import Any

import pytest

from worker.contract.presets import SEARCH_PRESETS
from worker.contract.spec import JobSpec
from worker.contract.specfile import SpecError, spec_from_dict, spec_from_text


def _spec(**fields: Any) -> JobSpec:
    return JobSpec.model_validate({"task": "rte", **fields})


def test_canonical_json_and_hash_ignore_spelling_but_not_content() -> None:
    a = spec_from_text("task: rte\ntraining: {epochs: 2, batch_size: 16}\nseeds: [1, 2]\n")
    b = spec_from_text(
        json.dumps({"seeds": [1, 2], "training": {"batch_size": 16, "epochs": 2}, "task": "rte"})
    )
    assert a.canonical_json() == b.canonical_json() and a.spec_hash() == b.spec_hash()
    assert JobSpec.model_validate_json(a.canonical_json()) == a  # the canonical form round-trips
    assert _spec(seeds=[1, 3]).spec_hash() != a.spec_hash()
    assert len(a.spec_hash()) == 64


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"task": "nope"}, "task"),
        ({"task": ["rte", "bogus"]}, "task"),
        ({"task": "rte", "trainig": {}}, "trainig"),
        ({"task": "rte", "method": "smrt"}, "method"),
        ({"task": "rte", "method_params": {"lamda_s": 1}}, "method_params"),
        ({"task": "rte", "method": "r3f", "method_params": {"ascent_steps": 1}}, "method_params"),
        ({"task": "rte", "method": "freelb", "method_params": {"mu": 1}}, "method_params"),
        ({"task": "rte", "training": {"learning_rate": -1}}, "training.learning_rate"),
        ({"task": "rte", "search_space": {"preset": "nope"}}, "search_space.preset"),
        ({"task": "rte", "search_space": {"axes": {"nope": {"values": [1]}}}}, "search_space.axes"),
        ({"task": "rte", "search_space": {"axes": {"lambda_s": {"type": "uniform", "low": 2, "high": 1}}}},
         "search_space.axes.lambda_s"),
        ({"task": "rte", "resources": {"gpus": 1.5}}, "resources.gpus"),
        ({"task": "rte", "seeds": []}, "seeds"),
        ({"task": "rte", "search_space": {"axes": {"epochs": {"values": [0]}}}}, "epochs"),
        ({"task": "rte", "search_space": {"axes": {"epochs": {"values": ["3"]}}}}, "epochs: '3' is not an integer"),
        ({"task": "rte", "search_space": {"axes": {"epochs": {"values": [2.5]}}}}, "is not an integer"),
        ({"task": "rte", "search_space": {"axes": {"learning_rate": {"values": ["1e-4"]}}}}, "is not a number"),
        ({"task": "rte", "search_space": {"axes": {"batch_size": {"type": "uniform", "low": 8, "high": 64}}}},
         "search_space.axes.batch_size: a uniform axis samples real numbers"),
        ({"task": "rte", "search_space": {"axes": {"learning_rate": {"type": "uniform", "low": 0, "high": 0.1}}}},
         "search_space.axes.learning_rate: invalid value for learning_rate: 0.0 must be > 0"),
        ({"task": "rte", "search_space": {"axes": {"mu": {"type": "uniform", "low": 0, "high": 1e400}}}},
         "finite bounds"),
        ({"task": "rte", "seeds": [2**32]}, "seeds.0"),
        ({"task": "rte", "seeds": [-1]}, "seeds.0"),
        ({"task": "rte", "training": {"workers": 2}, "resources": {"gpus": 4}}, "training.workers"),
        ({"task": "rte", "training": {"workers": 2}, "resources": {"gpus": 0.5}}, "training.workers"),
        ({"task": "rte", "training": {"workers": 2}, "resources": {"cpus": 1}}, "training.workers: 2 CPU ranks"),
        ({"task": "rte", "training": {"workers": 0}}, "training.workers"),
        ({"task": "rte", "training": {"workers": 16, "batch_size": 8}, "resources": {"cpus": 16}},
         "invalid value for workers"),
        ({"task": "rte", "training": {"dropout": 1.0}}, "training.dropout"),
    ],
)  # fmt: skip
def test_invalid_specs_name_the_field(document: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as info:
        spec_from_dict(document)
    assert field in str(info.value)


def test_unparsable_text_names_the_line() -> None:
    with pytest.raises(SpecError, match="line 2"):
        spec_from_text("task: rte\ntraining: {epochs: 2]\n")
    with pytest.raises(SpecError, match="mapping"):
        spec_from_text("- rte\n")


def test_presets_are_cited_data() -> None:
    for preset in SEARCH_PRESETS.values():
        assert preset.citation and preset.description
    paper = _spec(search_space={"preset": "smart-paper-grid"}).trials()
    assert len(paper) == 36
    assert {t["learning_rate"] for t in paper} == {1e-5, 2e-5, 3e-5, 5e-5}
    assert {t["batch_size"] for t in paper} == {16, 32, 64}
    assert {t["method_params"]["lambda_s"] for t in paper} == {1.0, 3.0, 5.0}
    first = paper[0]
    assert first["epochs"] == 6 and first["warmup_fraction"] == 0.1 and first["method"] == "smart"
    assert {k: first["method_params"][k] for k in ("mu", "epsilon", "sigma", "eta", "projection")} == {
        "mu": 1.0, "epsilon": 1e-5, "sigma": 1e-5, "eta": 1e-3, "projection": "ball"}  # fmt: skip
    ablation = _spec(search_space={"preset": "smart-ablation"}).trials()
    assert [t["method"] for t in ablation] == [
        "vanilla",
        "smart",
        "smart-breg-only",
        "smart-rs-only",
        "smart-renorm",
    ]
    assert len(_spec(search_space={"preset": "quick"}).trials()) == 2
    # The spec's own settings win over a preset's defaults.
    assert (
        _spec(training={"epochs": 2}, search_space={"preset": "smart-paper-grid"}).trials()[0]["epochs"] == 2
    )


def test_equivalent_cells_run_once() -> None:
    # lambda_s = 0: epsilon, sigma, eta, T_x and the projection change nothing -> 1 trial, not 32.
    no_rs = _spec(search_space={"axes": {"lambda_s": {"values": [0.0]}, "epsilon": {"values": [1e-5, 1e-3]},
                                         "sigma": {"values": [1e-5, 1e-4]}, "eta": {"values": [1e-3, 1e-2]},
                                         "ascent_steps": {"values": [1, 2]},
                                         "projection": {"values": ["ball", "renorm"]}}})  # fmt: skip
    assert len(no_rs.trials()) == 1
    # mu = 0 makes beta irrelevant: 1 trial for mu = 0, 2 for mu = 1.
    mus = _spec(search_space={"axes": {"mu": {"values": [0.0, 1.0]}, "beta_late": {"values": [0.999, 0.99]}}})
    assert len(mus.trials()) == 3
    # vanilla ignores every SMART setting.
    vanilla = _spec(
        search_space={"axes": {"method": {"values": ["vanilla"]}, "lambda_s": {"values": [1, 3, 5]}}}
    )
    assert len(vanilla.trials()) == 1


def _cells(method: str, **axes: list[Any]) -> int:
    space = {"method": {"values": [method]}} | {name: {"values": values} for name, values in axes.items()}
    return len(_spec(search_space={"axes": space}).trials())


def test_cells_that_differ_only_in_what_a_method_ignores_run_once() -> None:
    # R3F takes no ascent step: ε, η and the projection change nothing (σ and the noise do).
    assert _cells("r3f", epsilon=[1e-5, 1e-3], eta=[1e-3, 1e-2], projection=["ball", "renorm"]) == 1
    assert _cells("r3f", sigma=[1e-5, 1e-4], noise=["normal", "uniform"]) == 4
    # renorm's radius is ~1 per token whatever ε says; ball never divides by the stabiliser.
    assert _cells("smart-renorm", epsilon=[1e-5, 1e-3, 1e-2]) == 1
    assert _cells("smart", renorm_stabilizer=[1e-6, 1e-3]) == 1
    assert _cells("smart-renorm", renorm_stabilizer=[1e-6, 1e-3]) == 2
    # Diagnostics change what is logged, not what is trained; the teacher-only method perturbs nothing.
    assert _cells("smart", diagnostics_every=[1, 10]) == 1
    assert _cells("smart-breg-only", perturb_site=["embedding-output", "word-embeddings"]) == 1
    assert _cells("smart", rs_dropout=["independent", "shared", "off"]) == 3


def test_seeds_and_tasks_are_axes() -> None:
    spec = _spec(task=["rte", "mrpc"], seeds=[1, 2, 3], search_space={"preset": "quick"})
    trials = spec.trials()
    assert len(trials) == 2 * 3 * 2
    assert {(t["task"], t["seed"]) for t in trials} == {
        (task, s) for task in ("rte", "mrpc") for s in (1, 2, 3)
    }


def test_random_axes_are_left_to_tune() -> None:
    spec = _spec(
        search={"algorithm": "random", "num_samples": 4},
        search_space={"axes": {"learning_rate": {"type": "loguniform", "low": 1e-5, "high": 1e-4},
                               "batch_size": {"type": "choice", "values": [16, 32]},
                               "lambda_s": {"values": [1.0, 3.0]}}},
    )  # fmt: skip
    assert set(spec.sampled_axes()) == {"learning_rate", "batch_size"}
    assert "lambda_s" in spec.grid_axes() and len(spec.trials()) == 2
    # Under grid search a choice axis is a grid axis.
    grid = _spec(search_space={"axes": {"batch_size": {"type": "choice", "values": [16, 32]}}})
    assert not grid.sampled_axes() and len(grid.trials()) == 2


def test_a_copy_with_changes_is_hashed_afresh() -> None:
    spec = spec_from_text("task: rte\nseeds: [1, 2]\n")
    before, trials = spec.spec_hash(), spec.trials()
    changed = spec.model_copy(update={"seeds": [3]})
    assert changed.spec_hash() != before and len(changed.trials()) == 1 and len(trials) == 2
    assert spec.model_copy() == spec and spec.model_copy().spec_hash() == before


def test_a_trial_with_several_gpus_trains_on_as_many_ranks() -> None:
    """`resources.gpus: N` (N > 1) makes N data-parallel ranks unless the spec says otherwise; CPU ranks
    (gloo) are asked for explicitly."""
    assert {t["workers"] for t in _spec(resources={"gpus": 2}).trials()} == {2}
    assert {t["workers"] for t in _spec(resources={"gpus": 1}).trials()} == {1}
    assert {t["workers"] for t in _spec(training={"workers": 2}, resources={"cpus": 2}).trials()} == {2}
    assert _spec(resources={"gpus": 2}).spec_hash() != _spec(resources={"gpus": 1}).spec_hash()


def test_exponent_floats_stay_numbers_through_the_drivers_reading() -> None:
    """The canonical JSON writes 5e-05 (no dot), which PyYAML's YAML 1.1 reads as a string: a grid axis of
    learning rates then failed in the driver ("'5e-05' is not a number") after the service accepted it."""
    document = {
        "task": "rte",
        "training": {"learning_rate": 1e-4},
        "search_space": {"axes": {"learning_rate": {"type": "grid", "values": [5e-5, 1e-4]}}},
    }
    spec = spec_from_dict(document)
    again = spec_from_text(spec.canonical_json(), "SMARTUNE_JOB_SPEC")
    assert again.spec_hash() == spec.spec_hash()
    assert sorted(t["learning_rate"] for t in again.trials()) == [5e-5, 1e-4]
    from_yaml = spec_from_text(
        "task: rte\nsearch_space: {axes: {learning_rate: {type: grid, values: [5e-5, 1e-4]}}}\n"
    )
    assert sorted(t["learning_rate"] for t in from_yaml.trials()) == [5e-5, 1e-4]


def test_the_stall_timeout_is_hashed_only_when_set() -> None:
    """A limit added after jobs were submitted: unset, it leaves the canonical form (and so the hash of
    every older spec, which a resumed sweep compares) as it was."""
    unset, bounded = _spec(), _spec(limits={"stall_timeout_s": 600})
    assert "stall_timeout_s" not in unset.canonical_json()
    assert unset.limits.stall_timeout_s is None and bounded.limits.stall_timeout_s == 600
    assert JobSpec.model_validate_json(bounded.canonical_json()) == bounded
    assert bounded.spec_hash() != unset.spec_hash()
    with pytest.raises(SpecError, match="limits.stall_timeout_s"):
        spec_from_dict({"task": "rte", "limits": {"stall_timeout_s": 0}})
