"""A method's parameters from the spec to MethodConfig: one name (`method_params`), one shape (nested in a
trial's values), flat names set and read in one place each, the equivalence by field role, one plan per
spec (docs/architecture.md §2, "One trial field, followed")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from smart_core.config import FIELD_CHOICES, FIELD_ROLES, MethodConfig, method_config
from worker.contract import spec as spec_module
from worker.contract.grid import (
    _ADVERSARIAL,
    _ASCENT,
    _BREGMAN,
    _OBSERVATION,
    _PERTURBATION,
    canonical_method,
    cell_params,
    flat_config,
    flat_values,
    make_trial,
    resolve,
    with_values,
)
from worker.contract.spec import PLAN_OF, JobSpec
from worker.contract.trial import TrainConfig


def _spec(**changes: Any) -> JobSpec:
    doc = {"task": "rte", "model": "tiny-random", "data": "/abs/glue", "method": "smart"} | changes
    return JobSpec.model_validate(doc)


# ---- the equivalence, by each field's declared role -------------------------------------------------


# Fields declared since the tuples were typed by hand, each with its role.
ADDED_SINCE = {"rs_arithmetic": "perturbation"}


def test_the_generated_tuples_are_the_hand_typed_ones() -> None:
    """canonical_method blanks what it blanked when these names were typed by hand in grid.py."""
    assert {n: FIELD_ROLES[n] for n in ADDED_SINCE} == ADDED_SINCE
    assert set(_PERTURBATION) - set(ADDED_SINCE) == {"epsilon", "sigma", "noise", "eta", "ascent_steps",
        "projection", "grad_norm", "norm_p", "renorm_stabilizer", "rs_dropout"}  # fmt: skip
    assert set(_ASCENT) == {"epsilon", "eta", "projection", "grad_norm", "norm_p", "renorm_stabilizer"}
    assert set(_BREGMAN) == {"bregman", "inner_updates", "beta_early", "beta_late", "beta_switch",
                             "teacher_dropout"}  # fmt: skip
    assert set(_ADVERSARIAL) == {"adv_steps", "adv_lr", "adv_init_mag", "adv_max_norm", "adv_norm"}
    assert _OBSERVATION == ("diagnostics_every",)


def _other(name: str, value: Any) -> Any:
    """Another valid value of the field `name`."""
    if name in FIELD_CHOICES:
        return next(c for c in FIELD_CHOICES[name] if c != value)
    return value + 1 if isinstance(value, int) else value / 2 if value else 0.5


# (base method, roles whose fields it ignores): vary any such field, and the cell stays the same.
IGNORED = [
    ("smart-breg-only", ("perturbation", "ascent", "site", "adversarial", "observation")),  # λ_s = 0
    ("smart-rs-only", ("bregman", "adversarial", "observation")),  # μ = 0
    ("r3f", ("ascent", "bregman", "adversarial", "observation")),  # T_x = 0, no teacher
    ("vanilla", ("perturbation", "ascent", "site", "bregman", "adversarial", "observation")),
    ("smart", ("adversarial", "observation")),
]


@pytest.mark.parametrize(("preset", "roles"), IGNORED, ids=[p for p, _ in IGNORED])
def test_a_field_is_ignored_where_its_role_says(preset: str, roles: tuple[str, ...]) -> None:
    base = method_config(preset)
    for name, role in FIELD_ROLES.items():
        if role not in roles:
            continue
        varied = base.with_overrides(**{name: _other(name, getattr(base, name))})
        assert canonical_method(varied) == canonical_method(base), f"{preset}: {name} ({role})"


def test_a_field_counts_where_its_method_uses_it() -> None:
    smart = MethodConfig()
    changed = {"lambda_s": 3.0, "mu": 0.5, "epsilon": 1e-4, "sigma": 1e-4, "noise": "uniform", "eta": 1e-2,
               "projection": "renorm", "rs_dropout": "shared", "beta_late": 0.9, "teacher_dropout": "shared",
               "perturb_site": "word-embeddings"}  # fmt: skip
    for name, value in changed.items():
        assert canonical_method(smart.with_overrides(**{name: value})) != canonical_method(smart), name
    freelb = method_config("freelb")
    for name in ("adv_steps", "adv_lr", "adv_init_mag", "adv_max_norm", "adv_norm"):
        varied = freelb.with_overrides(**{name: _other(name, getattr(freelb, name))})
        assert canonical_method(varied) != canonical_method(freelb), name


# ---- one name, and the old one still read --------------------------------------------------------------


def test_a_trial_recorded_under_the_old_name_still_resolves() -> None:
    """Tune's experiment state of a job begun before the rename (its trial configs, which the next attempt
    resumes) and MLflow's `smartune.prov.config` of its runs (what an audit re-runs) say
    `method_overrides`."""
    now = TrainConfig(task="rte", model="tiny-random", method="smart", method_params={"lambda_s": 3.0})
    old = {k: v for k, v in now.to_dict().items() if k != "method_params"}
    old["method_overrides"] = {"lambda_s": 3.0}
    assert TrainConfig.from_dict(old) == now
    recorded = json.dumps({k: v for k, v in old.items() if k != "resolved_method"}, sort_keys=True)
    assert TrainConfig.from_dict(json.loads(recorded)) == now  # an audit of an old run
    axes = ("lambda_s", "seed")
    grid = resolve(old, None, axes)  # a grid trial of the old experiment state
    assert grid.config == now and grid.cell == {"lambda_s": 3.0}
    sampled = resolve(old, {"epsilon": 1e-4}, axes)  # and one with values sampled by Tune
    assert sampled.config.method_params == {"epsilon": 1e-4, "lambda_s": 3.0}
    assert sampled.config.method_config().lambda_s == 3.0
    with pytest.raises(ValueError, match="one field"):
        TrainConfig.from_dict({**old, "method_params": {}})
    assert "method_overrides" not in json.dumps(now.to_dict())  # written under the new name only


# ---- one shape, converted in one place each ------------------------------------------------------------


def test_flat_names_go_into_the_nested_shape_and_back() -> None:
    trial = with_values(
        {"method": "smart", "method_params": {"epsilon": 1e-4}}, {"lambda_s": 3.0, "epochs": 2}
    )
    assert trial == {"method": "smart", "method_params": {"epsilon": 1e-4, "lambda_s": 3.0}, "epochs": 2}
    assert flat_values(trial) == {"method": "smart", "epsilon": 1e-4, "lambda_s": 3.0, "epochs": 2}
    assert cell_params(trial, ("lambda_s", "epochs", "mu", "seed")) == {
        "lambda_s": 3.0,
        "epochs": 2,
        "mu": None,
    }
    with pytest.raises(ValueError, match="unknown field"):
        with_values(trial, {"lambda": 1.0})
    with pytest.raises(ValueError, match="unknown field"):
        with_values(trial, {"method_params": {}})  # the nested dict is no flat name


def test_a_preset_pins_its_own_fields_per_trial() -> None:
    base = with_values({"task": "rte", "model": "tiny-random"}, {"lambda_s": 3.0, "epsilon": 1e-4})
    values, config = make_trial(base, {"method": "vanilla", "epsilon": 1e-3})
    assert values["method_params"] == {"epsilon": 1e-3}  # vanilla pins λ_s (and μ): the 3.0 is dropped
    assert config == TrainConfig.from_dict(values) and config.method_config().lambda_s == 0.0
    assert make_trial(base, {"method": "smart"})[0]["method_params"] == {"epsilon": 1e-4, "lambda_s": 3.0}
    with pytest.raises(ValueError, match="lambda_s must be a number"):
        make_trial(base, {"lambda_s": "lots"})


def test_the_mlflow_params_are_the_resolved_config_under_flat_names() -> None:
    config = TrainConfig(task="rte", method="smart-renorm", method_params={"lambda_s": 3.0},
                         columns={"sentence1": "a"})  # fmt: skip
    flat = flat_config(config)
    # What worker.tune.tracking.flat_params logged before: the train fields, then the resolved method's.
    values = config.to_dict()
    before = {k: v for k, v in values.items() if k not in ("method_params", "resolved_method")}
    before |= {k: v for k, v in values["resolved_method"].items() if k != "method"}
    assert flat == before and list(flat) == list(before)
    assert (flat["method"], flat["lambda_s"], flat["projection"], flat["mu"]) == (
        "smart-renorm",
        3.0,
        "renorm",
        1.0,
    )
    assert "method_params" not in flat


# ---- one plan per spec ---------------------------------------------------------------------------------


def test_trials_nest_the_method_params_as_the_spec_writes_them() -> None:
    spec = _spec(method_params={"lambda_s": 3.0, "projection": "renorm"},
                 search_space={"axes": {"learning_rate": {"values": [1e-4, 2e-4]}}})  # fmt: skip
    trials = spec.trials()
    assert [t["method_params"] for t in trials] == [{"lambda_s": 3.0, "projection": "renorm"}] * 2
    assert spec.base_values()["method_params"] == {"lambda_s": 3.0, "projection": "renorm"}
    trials[0]["method_params"]["lambda_s"] = 99.0  # a copy: the plan itself is untouched
    assert spec.trials()[0]["method_params"]["lambda_s"] == 3.0


def _count_expansions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    expand = spec_module.expand_grid

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return expand(*args, **kwargs)

    monkeypatch.setattr(spec_module, "expand_grid", counted)
    return calls


def test_the_plan_is_expanded_once_per_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control plane pins a dataset reference (model_copy of `data`) and the GPU memory (a document
    validated again): neither expands the grid again."""
    calls = _count_expansions(monkeypatch)
    spec = _spec(
        search_space={"axes": {"lambda_s": {"values": [1.0, 3.0]}}}, seeds=[1, 2], resources={"gpus": 1}
    )
    assert len(calls) == 1
    pinned = spec.model_copy(update={"data": "dataset:sha256:" + "a" * 64})
    assert [t["data"] for t in pinned.trials()] == ["dataset:sha256:" + "a" * 64] * 4 and len(calls) == 1
    fresh = JobSpec.model_validate_json(pinned.canonical_json())  # what a second expansion would give
    assert fresh.trials() == pinned.trials() and fresh.plan_digest() == pinned.plan_digest()
    calls.clear()
    document = json.loads(spec.canonical_json())
    document["resources"]["gpu_memory_mb"] = 4000.0
    again = JobSpec.model_validate(document, context={PLAN_OF: spec})
    assert not calls and again.trials() == spec.trials()
    other = spec.model_copy(update={"seeds": [1]})  # a plan input changed: expanded anew
    assert len(other.trials()) == 2 and len(calls) == 1


def test_the_plan_digest_names_the_trials() -> None:
    spec = _spec(search_space={"axes": {"lambda_s": {"values": [1.0, 3.0]}}})
    at_driver = JobSpec.model_validate_json(spec.canonical_json())
    assert at_driver.plan_digest() == spec.plan_digest() and len(spec.plan_digest()) == 64
    assert (
        _spec(search_space={"axes": {"lambda_s": {"values": [1.0, 5.0]}}}).plan_digest() != spec.plan_digest()
    )
