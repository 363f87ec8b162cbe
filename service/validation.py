"""What the control plane adds to `JobSpec`'s own validation: this deployment's limits and data roots.

`JobSpec` (worker/contract/spec.py) rejects unknown tasks, methods, fields and bad ranges; here a valid spec is
checked against the service's configuration and the submitting team: trial and seed counts, local paths
(data and model; absolute, by worker.contract.sources) that must exist under a configured data root, and
GPUs that the team's quota can never grant. Each failure names the field, for a 422.
"""

from __future__ import annotations

import os

from service.config import Settings
from service.errors import ApiError
from service.models import Team
from worker.contract.sources import SourceError, classify
from worker.contract.spec import JobSpec


def invalid(field: str, detail: str) -> ApiError:
    return ApiError(422, f"{field}: {detail}", field=field)


def count_trials(spec: JobSpec) -> int:
    """Trials the sweep runs: deduplicated grid cells (seeds included) times the samples per cell."""
    return len(spec.trials()) * spec.search.num_samples


def check_path(value: str | None, field: str, settings: Settings) -> None:
    """A local path (the contract's rule: absolute) must exist under a data root; an alias or a hub id
    passes (whether a hub id may be used at all is the worker's network's business)."""
    if value is None:
        return
    try:
        source = classify(value, field, aliases=field == "model")
    except SourceError as err:
        raise invalid(field, str(err).removeprefix(f"{field}: ")) from None
    if source.kind != "local":
        return
    path = source.path.resolve()
    roots = settings.allowed_roots
    if not any(path.is_relative_to(root) for root in roots):
        allowed = ", ".join(str(r) for r in roots)
        raise invalid(field, f"{value!r} lies outside the allowed data roots ({allowed})")
    if not path.exists():
        raise invalid(field, f"{value!r} does not exist")
    if not os.access(path, os.R_OK):
        raise invalid(field, f"{value!r} is not readable")


def check_spec(spec: JobSpec, *, settings: Settings, team: Team) -> int:
    """Apply the deployment's limits to a valid spec; return its number of trials."""
    if len(spec.seeds) > settings.max_seeds:
        raise invalid("seeds", f"{len(spec.seeds)} seeds; the limit is {settings.max_seeds}")
    n_trials = count_trials(spec)
    if n_trials > settings.max_cells:
        raise invalid(
            "search_space",
            f"the sweep has {n_trials} trials (cells x seeds x samples); the limit is {settings.max_cells}",
        )
    check_path(spec.data, "data", settings)
    check_path(spec.model, "model", settings)
    if team.gpu_quota is not None:
        per_trial = spec.resources.gpus
        if per_trial > team.gpu_quota:
            raise invalid(
                "resources.gpus",
                f"{per_trial:g} GPUs per trial exceed the team's quota of {team.gpu_quota:g}",
            )
        peak = per_trial * min(spec.limits.max_concurrent_trials, n_trials)
        if peak > team.gpu_quota:
            raise invalid(
                "limits.max_concurrent_trials",
                f"{min(spec.limits.max_concurrent_trials, n_trials)} concurrent trials x {per_trial:g} GPUs "
                f"exceed the team's quota of {team.gpu_quota:g} GPUs",
            )
    return n_trials
