"""What the control plane adds to `JobSpec`'s own validation: this deployment's limits and data roots.

`JobSpec` (worker/contract/spec.py) rejects unknown tasks, methods, fields and bad ranges; here a valid spec is
checked against the service's configuration and the submitting team: trial and seed counts, wall time, size,
and local paths (data and model; absolute, by worker.contract.sources) that must exist under a configured
data root. Each failure names the field, for a 422. What the team and the pool may grant now (priority,
quotas, the pool, the budget, the queue) is service.admission's, the same for retries and audits.
"""

from __future__ import annotations

import fnmatch
import os

from service.config import Settings
from service.errors import ApiError
from service.store.models import Team
from worker.contract.sources import SourceError, classify
from worker.contract.spec import JobSpec


def invalid(field: str, detail: str) -> ApiError:
    return ApiError(422, f"{field}: {detail}", field=field)


def count_trials(spec: JobSpec) -> int:
    """Trials the sweep runs: deduplicated grid cells (seeds included), times a custom function's own grid
    combinations, times the samples per cell."""
    return spec.trial_count()


def _hub_allowed(hub_id: str, settings: Settings) -> bool:
    return any(fnmatch.fnmatchcase(hub_id, pattern) for pattern in settings.hub_allow)


def check_path(
    value: str | None, field: str, settings: Settings, team_roots: list[str] | None = None
) -> None:
    """A local path (the contract's rule: absolute) must exist under one of the team's data roots; a hub
    id must be allowed by the deployment (no hub access at all unless configured); aliases pass."""
    if value is None:
        return
    try:
        source = classify(value, field, aliases=field == "model")
    except SourceError as err:
        raise invalid(field, str(err).removeprefix(f"{field}: ")) from None
    if source.kind == "hub":
        if not _hub_allowed(source.value, settings):
            raise invalid(field, f"{value!r} is a hub id, and this deployment downloads nothing from the hub "
                                 "(SMARTUNE_HUB_ALLOW)")  # fmt: skip
        return
    if source.kind != "local":
        return
    path = source.path.resolve()  # symlinks resolved: the real place must lie under a root
    roots = settings.allowed_roots(team_roots)
    if not any(path.is_relative_to(root) for root in roots):
        allowed = ", ".join(str(r) for r in roots) or "none: this deployment takes no local paths"
        raise invalid(field, f"{value!r} lies outside the allowed data roots ({allowed})")
    if not path.exists():
        raise invalid(field, f"{value!r} does not exist")
    if not os.access(path, os.R_OK):
        raise invalid(field, f"{value!r} is not readable")


def quotas(team: Team, settings: Settings) -> tuple[float, float]:
    """The team's (GPU, CPU) quotas: its own, else the deployment's default. Every team has both."""
    gpus = team.gpu_quota if team.gpu_quota is not None else settings.default_gpu_quota
    cpus = team.cpu_quota if team.cpu_quota is not None else settings.default_cpu_quota
    return gpus, cpus


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
    budget = spec.limits.time_budget_s
    if budget is not None and budget > settings.max_job_wall_time_s:
        raise invalid("limits.time_budget_s",
                      f"{budget:g} s exceeds this deployment's maximum wall time of {settings.max_job_wall_time_s:g} s")  # fmt: skip
    size = len(spec.canonical_json().encode())
    if size > settings.max_spec_bytes:
        raise ApiError(413, f"the spec is {size // 1024} KiB as canonical JSON; the limit is "
                            f"{settings.max_spec_bytes // 1024} KiB (it travels to the driver in one environment "
                            "variable)")  # fmt: skip
    check_path(spec.data, "data", settings, team.data_roots)
    check_path(spec.model, "model", settings, team.data_roots)
    return n_trials
