"""Expand a job spec's grid into trial configurations, running equivalent cells once.

A trial configuration is a dict TrainConfig.from_dict accepts. Equivalence (docs/architecture.md §4): with λ_s = 0 the
perturbation settings (ε, σ, η, T_x, projection, ...) change nothing; with μ = 0 the Bregman settings (β,
S, the reference kind) change nothing; the adversarial baselines' settings matter only to FreeLB and PGD.
Pure Python: no torch, no ray (the control plane counts cells with it at submission).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from smart_core.config import METHOD_PRESETS, TUNABLE_PRESET_FIELDS, MethodConfig
from worker.contract.trial import KNOBS, TrainConfig

TRAIN_FIELDS = frozenset(KNOBS) - {"method_overrides"}
METHOD_FIELDS = frozenset(f.name for f in fields(MethodConfig)) - {"method"}
# What a grid or search may vary: the trial fields declared sweepable (not the data, the model or the
# machine-level knobs such as threads and device, which belong to the deployment) and the method's fields.
SWEEPABLE = frozenset(name for name, knob in KNOBS.items() if knob.sweep) | METHOD_FIELDS

_PERTURBATION = (
    "epsilon",
    "sigma",
    "noise",
    "eta",
    "ascent_steps",
    "projection",
    "grad_norm",
    "norm_p",
    "renorm_stabilizer",
    "rs_dropout",
)
_ASCENT = ("epsilon", "eta", "projection", "grad_norm", "norm_p", "renorm_stabilizer")  # unused with T_x = 0
_BREGMAN = ("bregman", "inner_updates", "beta_early", "beta_late", "beta_switch", "teacher_dropout")
_ADVERSARIAL = ("adv_steps", "adv_lr", "adv_init_mag", "adv_max_norm", "adv_norm")
# Settings that change what is logged, never what is trained.
_OBSERVATION = ("diagnostics_every",)


def trial_config(values: Mapping[str, Any]) -> dict[str, Any]:
    """Split flat values (train and method fields) into a TrainConfig dict; the method preset pins its fields."""
    unknown = sorted(set(values) - TRAIN_FIELDS - METHOD_FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(unknown)}")
    method = values.get("method", "smart")
    if method not in METHOD_PRESETS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(sorted(METHOD_PRESETS))}")
    pinned = (
        set(METHOD_PRESETS[method]) - {"method"} - TUNABLE_PRESET_FIELDS
    )  # vanilla pins lambda_s = mu = 0
    overrides = {k: v for k, v in values.items() if k in METHOD_FIELDS and k not in pinned}
    config = {k: v for k, v in values.items() if k in TRAIN_FIELDS}
    config["method_overrides"] = dict(sorted(overrides.items()))
    try:
        TrainConfig.from_dict(config)  # validates every value now, before any trial starts
    except TypeError as err:  # e.g. lambda_s: "lots" compared with 0
        raise ValueError(f"a value has the wrong type: {err}") from err
    return config


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


def equivalence_key(config: Mapping[str, Any]) -> str:
    """Two trial configs with the same key train identically."""
    train = TrainConfig.from_dict(dict(config))
    plain = {
        k: v for k, v in train.to_dict().items() if k not in ("method", "method_overrides", "resolved_method")
    }
    return json.dumps(
        {**plain, "method": canonical_method(train.method_config())}, sort_keys=True, default=str
    )


def expand_grid(
    base: Mapping[str, Any], axes: Mapping[str, Iterable[Any]]
) -> tuple[list[dict[str, Any]], int]:
    """All combinations of the axes over `base`, deduplicated; returns (trial configs, cells before dedup)."""
    names = list(axes)
    trials: dict[str, dict[str, Any]] = {}
    total = 0
    for combo in itertools.product(*(list(axes[n]) for n in names)):
        total += 1
        config = trial_config({**base, **dict(zip(names, combo, strict=True))})
        trials.setdefault(equivalence_key(config), config)
    return list(trials.values()), total


def cell_params(config: Mapping[str, Any], axes: Iterable[str]) -> dict[str, Any]:
    """The swept values of a trial, without its seed: what identifies its cell in a summary."""
    flat = {**config, **config.get("method_overrides", {})}
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
    """A trial from its grid values and, under random search, the values sampled for it."""
    values = dict(train)
    if sampled:
        flat = {k: v for k, v in values.items() if k != "method_overrides"}
        values = trial_config({**flat, **values.get("method_overrides", {}), **sampled})
    config = TrainConfig.from_dict(values)
    canonical = canonical_method(config.method_config())
    cell = {
        k: None if k in canonical and canonical[k] is None else v
        for k, v in cell_params(values, axes).items()
    }
    return ResolvedTrial(config, cell)
