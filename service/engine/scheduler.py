"""Admission: which queued jobs start now, in what order the rest wait, and why. Pure: no database, no Ray.

Order: higher priority first; between teams, weighted fair share (the team whose GPUs in use divided by its
weight is smallest goes next, then running jobs / weight); within a team and priority, first in first out.
A job is admitted when its team stays within its quotas (concurrent jobs; GPUs and CPUs, counting the
job's peak footprint: its concurrent trials times what each asks) and the pool has room for its first
trial. A job that waits for free room in the pool holds back every later job needing the same kind of
resource, so small jobs cannot starve a large one; a job the pool can never hold (it shrank since the
job was accepted) holds back nothing. Every waiting job gets a reason.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class QueuedJob:
    id: str
    team_id: int
    priority: int
    queued_at: float  # seconds; the FIFO key
    cpus: float  # per trial: the admission test
    gpus: float
    footprint_cpus: float  # at its peak: what it holds once admitted
    footprint_gpus: float


@dataclass(slots=True)
class TeamState:
    id: int
    name: str
    weight: float = 1.0
    gpu_quota: float | None = None  # None: no GPU limit
    cpu_quota: float | None = None  # None: no CPU limit
    max_jobs: int | None = None  # None: no limit on concurrent jobs
    gpus_in_use: float = 0.0
    cpus_in_use: float = 0.0
    jobs_running: int = 0

    def share(self) -> tuple[float, float]:
        weight = max(self.weight, _EPS)
        return self.gpus_in_use / weight, self.jobs_running / weight


class Resources(NamedTuple):
    cpus: float
    gpus: float


@dataclass
class Plan:
    admitted: list[str] = field(default_factory=list)  # in admission order
    order: list[str] = field(default_factory=list)  # every queued job, in the order it was considered
    reasons: dict[str, str] = field(default_factory=dict)  # job id -> why it waits / why it was admitted
    # admitted job id -> what it waits for once dispatched: the autoscaler's node (service.engine.autoscaler)
    waits: dict[str, str] = field(default_factory=dict)


def _gpus(n: float) -> str:
    return f"{n:g} GPU" + ("" if n == 1 else "s")


def _never_fits(job: QueuedJob, total: Resources) -> bool:
    return job.gpus > total.gpus + _EPS or job.cpus > total.cpus + _EPS


def _quota_reason(team: TeamState, job: QueuedJob) -> str | None:
    if (
        team.gpu_quota is not None
        and job.gpus > 0
        and team.gpus_in_use + job.footprint_gpus > team.gpu_quota + _EPS
    ):
        return (f"team quota: {team.gpus_in_use:g}/{team.gpu_quota:g} GPUs in use, needs "
                f"{_gpus(job.footprint_gpus)} at its peak")  # fmt: skip
    if (
        team.cpu_quota is not None
        and job.cpus > 0
        and team.cpus_in_use + job.footprint_cpus > team.cpu_quota + _EPS
    ):
        return (f"team quota: {team.cpus_in_use:g}/{team.cpu_quota:g} CPUs in use, needs "
                f"{job.footprint_cpus:g} CPUs at its peak")  # fmt: skip
    return None


def _pool_reason(job: QueuedJob, free: Resources, total: Resources) -> str | None:
    if job.gpus > total.gpus + _EPS:
        return f"pool too small: needs {_gpus(job.gpus)} per trial, the pool has {total.gpus:g}"
    if job.cpus > total.cpus + _EPS:
        return f"pool too small: needs {job.cpus:g} CPUs per trial, the pool has {total.cpus:g}"
    if job.gpus > free.gpus + _EPS:
        return f"pool full: needs {_gpus(job.gpus)}, {max(free.gpus, 0):g} free"
    if job.cpus > free.cpus + _EPS:
        return f"pool full: needs {job.cpus:g} CPUs, {max(free.cpus, 0):g} free"
    return None


def plan(
    queued: list[QueuedJob],
    teams: dict[int, TeamState],
    free: Resources,
    total: Resources,
    never: Mapping[str, str] | None = None,
) -> Plan:
    """Decide one scheduling round. `teams` is updated in place with what the admitted jobs take. `never`:
    jobs no node could ever hold, with the reason (the caller knows the nodes; `total` is pool-wide): they
    wait with it and hold back nothing."""
    never = never or {}
    result = Plan()
    by_team: dict[int, list[QueuedJob]] = defaultdict(list)
    for job in queued:
        by_team[job.team_id].append(job)
    heap: list[tuple[int, float, float, float, str, int, int]] = []

    def push(team_id: int, index: int) -> None:
        jobs = by_team[team_id]
        if index < len(jobs):
            head = jobs[index]
            share = teams[team_id].share()
            heapq.heappush(heap, (-head.priority, *share, head.queued_at, head.id, team_id, index))

    for team_id, jobs in by_team.items():
        jobs.sort(key=lambda j: (-j.priority, j.queued_at, j.id))
        teams.setdefault(team_id, TeamState(id=team_id, name=str(team_id)))
        push(team_id, 0)

    cpus, gpus = free
    blocked_gpu = blocked_cpu = False  # a higher-ranked job waits for the pool
    while heap:
        *_, team_id, index = heapq.heappop(heap)
        team, job = teams[team_id], by_team[team_id][index]
        result.order.append(job.id)
        if team.max_jobs is not None and team.jobs_running >= team.max_jobs:
            reason = f"team quota: {team.jobs_running}/{team.max_jobs} concurrent jobs"
            for rest in by_team[team_id][index:]:
                result.reasons[rest.id] = reason
            result.order.extend(j.id for j in by_team[team_id][index + 1 :])
            continue
        if job.id in never:
            result.reasons[job.id] = never[job.id]
        elif quota_reason := _quota_reason(team, job):
            result.reasons[job.id] = quota_reason
        elif pool_reason := _pool_reason(job, Resources(cpus, gpus), total):
            result.reasons[job.id] = pool_reason
            if not _never_fits(job, total):  # waiting for room: later jobs of the same kind wait behind it
                blocked_gpu |= job.gpus > 0
                blocked_cpu |= job.cpus > 0
        elif (blocked_gpu and job.gpus > 0) or (blocked_cpu and job.cpus > 0):
            result.reasons[job.id] = "waiting behind a higher-ranked job that waits for the pool"
        else:
            result.reasons[job.id] = (
                f"admitted: priority {job.priority}, team {team.name} at {team.gpus_in_use:g} GPUs "
                f"in use / weight {team.weight:g}; pool had {gpus:g} GPUs, {cpus:g} CPUs free"
            )
            result.admitted.append(job.id)
            cpus, gpus = max(cpus - job.footprint_cpus, 0.0), max(gpus - job.footprint_gpus, 0.0)
            team.gpus_in_use += job.footprint_gpus
            team.cpus_in_use += job.footprint_cpus
            team.jobs_running += 1
        push(team_id, index + 1)
    return result
