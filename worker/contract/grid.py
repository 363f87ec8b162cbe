"""Expand a job spec's grid into trial configurations, running equivalent cells once.

A trial's values are a dict TrainConfig.from_dict accepts: the trial fields at the top, the method's own
fields nested under `method_params` as the spec writes them. Values named flat (a grid axis, a sampled
value, a preset's default, a flag of `smartune train`) go into that shape in one place, `with_values`;
read back flat in one place, `flat_values`; `flat_config` is the resolved trial under flat names (the
MLflow params). Equivalence (docs/architecture.md §5): with λ_s = 0 the perturbation settings (ε, σ, η,
T_x, projection, ...) change nothing; with μ = 0 the Bregman settings (β, S, the reference kind) change
nothing; the adversarial baselines' settings matter only to FreeLB and PGD. Which field is which is each
MethodConfig field's role (smart_core.config.FIELD_ROLES).
Pure Python: no torch, no ray (the control plane counts cells with it at submission).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from smart_core.config import FIELD_ROLES, METHOD_PRESETS, TUNABLE_PRESET_FIELDS, MethodConfig, fields_with
from worker.contract.trial import KNOBS, TrainConfig, current_names, recorded_values

TRAIN_FIELDS = frozenset(KNOBS) - {"method_params"}
METHOD_FIELDS = frozenset(FIELD_ROLES) - {"method"}
# What a grid or search may vary: the trial fields declared sweepable (not the data, the model or the
# machine-level knobs such as threads and device, which belong to the deployment) and the method's fields.
SWEEPABLE = frozenset(name for name, knob in KNOBS.items() if knob.sweep) | METHOD_FIELDS

# What each switch of a method makes irrelevant to training: the fields of these roles (canonical_method).
_PERTURBATION = fields_with("perturbation", "ascent")  # unused without R_s
_ASCENT = fields_with("ascent")  # unused with T_x = 0
_BREGMAN = fields_with("bregman")  # unused without D_Breg
_ADVERSARIAL = fields_with("adversarial")  # unused by every method but FreeLB and PGD
_OBSERVATION = fields_with("observation")  # what is logged, never what is trained


def with_values(trial: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` named flat (grid axes, sampled values, a preset's defaults, `smartune train`'s flags) set
    into a copy of a trial's values: a method field under `method_params`, any other at the top. The one
    place where flat names become the nested shape."""
    unknown = sorted(set(values) - TRAIN_FIELDS - METHOD_FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(unknown)}")
    out = current_names(trial)
    params = dict(out.get("method_params") or {})
    for name, value in values.items():
        if name in METHOD_FIELDS:
            params[name] = value
        else:
            out[name] = value
    out["method_params"] = params
    return out


def flat_values(trial: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's values under flat names (the names of a spec's axes), as set: a method field its preset
    sets and the trial does not is absent. The one place where the nested shape is read flat."""
    values = current_names(trial)
    return {
        **{k: v for k, v in values.items() if k != "method_params"},
        **(values.get("method_params") or {}),
    }


def flat_config(config: TrainConfig) -> dict[str, Any]:
    """The resolved trial under flat names: every trial field but `method_params`, then every field of
    the resolved method but `method` (which stays the preset's name). What MLflow records as the run's
    params (worker.tune.tracking.flat_params)."""
    out = {k: v for k, v in asdict(config).items() if k != "method_params"}
    out |= {k: v for k, v in config.method_config().to_dict().items() if k != "method"}
    return out


def make_trial(base: Mapping[str, Any], values: Mapping[str, Any]) -> tuple[dict[str, Any], TrainConfig]:
    """One trial: `values` (flat names) over `base`; the method preset pins its own fields (vanilla pins
    lambda_s = mu = 0: a grid over lambda_s leaves it alone); validated by building its TrainConfig, once."""
    trial = with_values(base, values)
    method = trial.get("method", "smart")
    if method not in METHOD_PRESETS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(sorted(METHOD_PRESETS))}")
    pinned = set(METHOD_PRESETS[method]) - {"method"} - TUNABLE_PRESET_FIELDS
    trial["method_params"] = {k: v for k, v in sorted(trial["method_params"].items()) if k not in pinned}
    try:
        return trial, TrainConfig.from_dict(trial)  # every value checked now, before any trial starts
    except TypeError as err:  # e.g. lambda_s: "lots" compared with 0
        raise ValueError(f"a value has the wrong type: {err}") from err


def canonical_method(config: MethodConfig) -> dict[str, Any]:
    """The method's settings with the ones that cannot affect training blanked out: R3F's ε, η and
    projection (no ascent), `renorm`'s ε, `ball`'s stabiliser, the site where nothing is perturbed, ..."""
    out = config.to_dict()
    out.update(dict.fromkeys(_OBSERVATION))
    if not config.uses_smoothness:
        out.update(dict.fromkeys(_PERTURBATION), lambda_s=0.0)
    elif config.ascent_steps == 0:
        out.update(dict.fromkeys(_ASCENT))  # δ is the noise itself: nothing is stepped or projected
    elif config.projection == "renorm":
        out["epsilon"] = None  # renorm's radius is ~1 per token, whatever ε says
    else:
        out["renorm_stabilizer"] = None  # only renorm divides by it
    if not config.uses_bregman:
        out.update(dict.fromkeys(_BREGMAN), mu=0.0)
    if config.method not in ("freelb", "pgd"):
        out.update(dict.fromkeys(_ADVERSARIAL))
        if not config.uses_smoothness:
            out["perturb_site"] = None  # nothing is perturbed
    if config.method in ("smart", "r3f", "vanilla") and not (config.uses_smoothness or config.uses_bregman):
        out["method"] = "vanilla"
    return out


def equivalence_key(train: TrainConfig) -> str:
    """Two trials with the same key train identically."""
    plain = {k: v for k, v in asdict(train).items() if k not in ("method", "method_params")}
    return json.dumps(
        {**plain, "method": canonical_method(train.method_config())}, sort_keys=True, default=str
    )


def expand_grid(
    base: Mapping[str, Any], axes: Mapping[str, Iterable[Any]]
) -> tuple[list[dict[str, Any]], int]:
    """All combinations of the axes over `base`, deduplicated; returns (trial values, cells before dedup)."""
    names = list(axes)
    trials: dict[str, dict[str, Any]] = {}
    total = 0
    for combo in itertools.product(*(list(axes[n]) for n in names)):
        total += 1
        trial, train = make_trial(base, dict(zip(names, combo, strict=True)))
        trials.setdefault(equivalence_key(train), trial)
    return list(trials.values()), total


def plan_digest(trials: Sequence[Mapping[str, Any]]) -> str:
    """The SHA-256 of a plan (the set of its trials' values): the control plane's and the driver's plans
    of one spec are the same exactly when their digests are. Order-free: the stored spec's JSON sorts its
    keys, so the driver may expand the axes in another order than the body the service priced."""
    rows = sorted(json.dumps(dict(trial), sort_keys=True, default=str) for trial in trials)
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def cell_params(config: Mapping[str, Any], axes: Iterable[str]) -> dict[str, Any]:
    """The swept values of a trial, without its seed: what identifies its cell in a summary."""
    flat = flat_values(config)
    return {name: flat.get(name) for name in axes if name != "seed"}


def cell_key(cell: Mapping[str, Any]) -> str:
    """A cell as a string: two trials with the same key are seeds of one cell."""
    return json.dumps(dict(cell), sort_keys=True, default=str)


@dataclass(frozen=True)
class ResolvedTrial:
    """One trial, resolved once from its values: the config it trains and its cell (its values on the
    cell axes; a setting its method ignores is null). Passed along instead of being re-derived."""

    config: TrainConfig
    cell: dict[str, Any]

    @property
    def seed(self) -> int:
        return self.config.seed

    @property
    def planned_epochs(self) -> int:
        return self.config.epochs

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.cell.items())


def resolve(
    train: Mapping[str, Any], sampled: Mapping[str, Any] | None, axes: Iterable[str]
) -> ResolvedTrial:
    """A trial from its grid values and, under random search, the values sampled for it (set by
    `make_trial`, as a grid's are). An experiment begun before `method_params` had that name, or before
    `sampling` existed, still resolves as it ran: `recorded_values` reads its `method_overrides` and caps
    its rows in file order."""
    train = recorded_values(train)
    if sampled:
        values, config = make_trial(train, sampled)
    else:
        values = train
        config = TrainConfig.from_dict(values)
    canonical = canonical_method(config.method_config())
    cell = {
        k: None if k in canonical and canonical[k] is None else v
        for k, v in cell_params(values, axes).items()
    }
    return ResolvedTrial(config, cell)
