"""Admission: the one gate into the queue, for a submission, a retry and an audit alike.

What a job asks (`Ask`: its priority, its trials' CPUs and GPUs, how many at once, its device-hours still to
run) is checked against what its team may have now, in this order:

- its priority against the team's `max_priority`: a priority the spec sets above it is refused (422,
  `priority`); any other (the team's default, or a stored job's, after an admin lowered the maximum) is
  lowered to it, and the note says so for the job's timeline;
- one trial, and the job's peak (trials at once, as the scheduler counts them), against the team's GPU and
  CPU quotas;
- for a submitted spec, one trial against the pool: the capacity as read from Ray, or, while the pool has
  not been read yet, the largest node the deployment declares (`SMARTUNE_LARGEST_NODE_CPUS` / `_GPUS`; the
  embedded head's own size). A trial that fits it is admitted; one that does not, or that needs a kind
  of which no node is declared, is a 503 with `Retry-After`: whether it fits is known once the pool is read.
  With an autoscaler (`SMARTUNE_AUTOSCALER`) a trial that one of the node types it may add holds is
  admitted however empty the live pool is, and the quotas count trials at once against the pool's reach
  (service.engine.autoscaler); a trial no node type holds is judged as above.
  A stored job (a retry, an audit) ran on this pool once and may wait for it (docs/architecture.md §8);
- its estimate against what is left of the team's device-hour budget (409 with the numbers,
  service.costs.budget);
- the team's storage quota: a job adds checkpoints, so none is queued while the team's disk use is at or past
  it (409 with the numbers, service.storage.usage);
- the team's queue limit (429 with `Retry-After`).

A spec's refusals are 422s naming its field; a stored job's are 409s naming the same field (its request
has no body: what changed is the team's settings). A dry run goes through the same checks, reports the
budget and the storage instead of raising them, and takes no room in the queue.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from service.config import Settings
from service.costs import budget
from service.engine.autoscaler import Autoscaler, amounts
from service.engine.pool import concurrency, reach
from service.engine.scheduler import Resources
from service.errors import ApiError
from service.storage import usage as storage
from service.store import crud
from service.store.models import Job, JobState, Team
from service.validation import quotas

_EPS = 1e-9
KINDS = (("gpus", "GPUs"), ("cpus", "CPUs"))  # (field under `resources`, unit in messages)


@dataclass(frozen=True)
class Ask:
    """What a job asks of its team and of the pool."""

    priority: int
    cpus: float  # per trial
    gpus: float  # per trial
    max_concurrent: int  # trials at once it asks for
    n_trials: int
    unit: str  # the budget it draws on: "gpu-hours" or "cpu-hours"
    device_hours: float | None  # its estimate still to run; None = unknown (admitted; counted as it runs)
    from_spec: bool  # a submitted spec (422s, the pool checked); else a stored job: a retry, an audit (409s)
    explicit_priority: bool = False  # the spec set it: above the maximum is refused, not lowered

    def per_trial(self, kind: str) -> float:
        return self.gpus if kind == "gpus" else self.cpus


def stored_ask(job: Job, device_hours: float | None) -> Ask:
    """What a stored job asks when it is queued again (a retry) or re-runs trials (an audit: `job` is the
    audit), at its own priority."""
    return Ask(
        priority=job.priority,
        cpus=job.cpus_per_trial,
        gpus=job.gpus_per_trial,
        max_concurrent=job.max_concurrent_trials,
        n_trials=job.n_trials,
        unit=budget.unit_of(job),
        device_hours=device_hours,
        from_spec=False,
    )


@dataclass(frozen=True)
class Admission:
    priority: int  # the priority the job is queued at
    note: str | None  # what admission changed, for the job's timeline (a lowered priority); None: nothing
    budget: dict[str, Any]  # service.costs.budget.check's answer (+ `refusal` on a dry run over it)
    storage: dict[str, Any]  # the team's disk use against its quota, `fits`, `refusal` (service.storage)


def admit(
    session: Session,
    settings: Settings,
    team: Team,
    ask: Ask,
    *,
    capacity: Resources | None,
    dry_run: bool = False,
) -> Admission:
    """Admit `ask` for `team` (capacity: the pool as read from Ray, None while it has not been), or raise
    the ApiError that says why not. Nothing is written: the caller queues the job at the answer's priority.

    Unless `dry_run`, the team's row is locked (and re-read) until the caller commits: on PostgreSQL, where
    writes run side by side, two submissions checked at once would each find room in the team's queue,
    budget and storage that the other then takes. Uploads lock the same row (service.storage.uploads);
    SQLite has one writer at a time and no FOR UPDATE."""
    if not dry_run:
        session.refresh(team, with_for_update=True)
    priority, note = _priority(ask, team)
    _check_quotas(ask, team, settings, capacity)
    if ask.from_spec:
        _check_pool(ask, settings, capacity)
    plan = {"unit": ask.unit, "device_hours": ask.device_hours}
    try:
        answer = budget.check(session, team, settings, plan)  # 409 with the numbers when it does not fit
    except ApiError as err:
        if not dry_run:
            raise
        answer = {**(err.extra or {})["budget"], "refusal": err.detail}
    room = _check_storage(session, settings, team, dry_run)
    if not dry_run:
        _check_queue_room(session, settings, team)
    return Admission(priority=priority, note=note, budget=answer, storage=room)


def _check_storage(session: Session, settings: Settings, team: Team, dry_run: bool) -> dict[str, Any]:
    """The team's storage (service.storage.schemas.StorageCheck): 409 with the numbers when its quota is used
    up (a job adds checkpoints), which a dry run reports instead (`fits` false, `refusal`)."""
    try:
        used = storage.check_job(session, settings, team)
    except ApiError as err:
        if not dry_run:
            raise
        return {**(err.extra or {})["storage"], "fits": False, "refusal": err.detail}
    return {**used.public().model_dump(mode="json"), "fits": True, "refusal": None}


def _refusal(ask: Ask, field: str, detail: str) -> ApiError:
    if ask.from_spec:
        return ApiError(422, f"{field}: {detail}", field=field)
    return ApiError(409, f"{field}: {detail}; the job cannot be queued again as it is", field=field)


def _priority(ask: Ask, team: Team) -> tuple[int, str | None]:
    if ask.priority <= team.max_priority:
        return ask.priority, None
    if ask.explicit_priority:
        raise _refusal(
            ask, "priority", f"{ask.priority} is above the team's maximum priority of {team.max_priority}"
        )
    return (
        team.max_priority,
        f"priority lowered from {ask.priority} to {team.max_priority}, the team's maximum",
    )


def _check_quotas(ask: Ask, team: Team, settings: Settings, capacity: Resources | None) -> None:
    """A trial larger than a quota could never run; nor could a peak (trials at once x each) beyond it."""
    gpu_quota, cpu_quota = quotas(team, settings)
    limits = {"gpus": gpu_quota, "cpus": cpu_quota}
    for kind, unit in KINDS:
        per_trial = ask.per_trial(kind)
        if per_trial > limits[kind] + _EPS:
            raise _refusal(ask, f"resources.{kind}",
                           f"{per_trial:g} {unit} per trial exceed the team's quota of {limits[kind]:g}")  # fmt: skip
    pool = reach(capacity, Autoscaler.of(settings.autoscaled_node_types))  # with an autoscaler, its reach
    running = concurrency(ask.cpus, ask.gpus, ask.max_concurrent, ask.n_trials, pool)
    for kind, unit in KINDS:
        per_trial = ask.per_trial(kind)
        if per_trial > 0 and per_trial * running > limits[kind] + _EPS:
            raise _refusal(ask, "limits.max_concurrent_trials",
                           f"{running} concurrent trials x {per_trial:g} {unit} exceed the team's quota of "
                           f"{limits[kind]:g} {unit}")  # fmt: skip


def _check_pool(ask: Ask, settings: Settings, capacity: Resources | None) -> None:
    """One trial against the pool as read (422: it could never run), or, before the pool was ever read,
    against the largest node the deployment declares (503: ask again once it is read). With an autoscaler,
    a trial one of its node types holds fits, read or not."""
    autoscaler = Autoscaler.of(settings.autoscaled_node_types)
    if autoscaler is not None and autoscaler.runs(ask.cpus, ask.gpus, capacity):
        return
    if capacity is not None and autoscaler is not None:
        big = autoscaler.largest()
        kind, unit = next(((k, u) for k, u in KINDS if ask.per_trial(k) > getattr(big, k) + _EPS),
                          KINDS[0] if ask.gpus > 0 else KINDS[1])  # fmt: skip
        raise _refusal(ask, f"resources.{kind}", f"{ask.per_trial(kind):g} {unit} per trial fit no node: the "
                       f"pool has {getattr(capacity, kind):g} and no node type the autoscaler may add holds the "
                       f"trial (the largest have {amounts(big.cpus, big.gpus)})")  # fmt: skip
    if capacity is not None:
        for kind, unit in KINDS:
            per_trial, pool = ask.per_trial(kind), getattr(capacity, kind)
            if per_trial > 0 and per_trial > pool + _EPS:
                raise _refusal(
                    ask, f"resources.{kind}", f"{per_trial:g} {unit} per trial exceed the pool of {pool:g}"
                )
        return
    declared = {"gpus": settings.largest_node_gpus, "cpus": settings.largest_node_cpus}
    for kind, unit in KINDS:
        per_trial, node = ask.per_trial(kind), declared[kind]
        if per_trial <= 0 or (node is not None and per_trial <= node + _EPS):
            continue
        limit = f"the largest node this deployment declares has {node:g}" if node is not None else (
            f"this deployment declares no node size (SMARTUNE_LARGEST_NODE_{kind.upper()})")  # fmt: skip
        raise ApiError(
            503,
            f"resources.{kind}: the pool has not been read from Ray yet and {per_trial:g} {unit} per trial may "
            f"not fit it ({limit}); try again once it is read",
            field=f"resources.{kind}",
            headers={"Retry-After": str(_pool_read_wait_s(settings))},
        )


def _pool_read_wait_s(settings: Settings) -> int:
    """Seconds until the engine reads the pool again: its next round, or the next read after a failed one."""
    return max(1, math.ceil(max(settings.scheduler_interval_s, settings.capacity_ttl_s)))


def _check_queue_room(session: Session, settings: Settings, team: Team) -> None:
    """429 when the team already has its limit of queued jobs."""
    waiting = crud.count_team_jobs(session=session, team_id=team.id, states=[JobState.QUEUED])
    if waiting >= settings.max_queued_jobs_per_team:
        raise ApiError(  # room comes back when the scheduler admits one: try again after a round
            429,
            f"the team has {waiting} queued jobs; the limit is {settings.max_queued_jobs_per_team}",
            headers={"Retry-After": str(max(1, math.ceil(settings.scheduler_interval_s)))},
        )
