"""The pool as the scheduler sees it, read from the job store in a few column queries.

`load` gathers the queued jobs, every team's quota and current holdings, and what dispatched and running
jobs reserve; `plan_round` runs the scheduler on it. The engine acts on the plan; the pool routes show it.
With an autoscaler both take the pool's reach (service.engine.autoscaler), not only its live nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.engine import scheduler
from service.engine.autoscaler import Autoscaler
from service.engine.scheduler import Plan, QueuedJob, Resources, TeamState
from service.store.models import ACTIVE_STATES, Job, JobState, Team, Trial


@dataclass
class PoolState:
    queued: list[QueuedJob]
    teams: dict[int, TeamState]
    reserved: Resources
    jobs_queued: dict[int, int]
    wait_reasons: dict[str, str | None]
    queued_at: dict[str, datetime]


def concurrency(cpus: float, gpus: float, max_concurrent: int, n_trials: int, pool: Resources | None) -> int:
    """Trials of a job that can run at once: what it asks, no more than it has, and no more than the pool
    can hold side by side (Ray never runs more, so a job is not charged for more)."""
    n = max(1, min(max_concurrent, n_trials))
    if pool is not None:
        if gpus > 0:
            n = min(n, max(1, int(pool.gpus // gpus)))
        if cpus > 0:
            n = min(n, max(1, int(pool.cpus // cpus)))
    return n


# Trials that will not run again: a finished or ASHA-stopped one. An ERROR may still be retried by Tune.
DONE_TRIAL_STATES = ("TERMINATED", "STOPPED")


def finished_trials(session: Session) -> dict[str, int]:
    """Active job id -> its trials that have ended for good (as last synced from MLflow)."""
    rows = (
        select(Trial.job_id, func.count())
        .join(Job, Job.id == Trial.job_id)
        .where(Job.state.in_(ACTIVE_STATES), Trial.state.in_(DONE_TRIAL_STATES))
        .group_by(Trial.job_id)
    )
    return {job_id: int(n) for job_id, n in session.execute(rows)}


def left_to_run(n_trials: int, finished: int) -> int:
    """The trials a running job may still run at once are at most its unfinished ones: a job in its last
    wave reserves only those (research/pool_sim measured the whole footprint held to the last trial idling
    about 5% of a busy pool)."""
    return max(1, n_trials - finished)


def load(
    session: Session,
    *,
    default_max_jobs: int,
    capacity: Resources | None = None,
    default_gpu_quota: float | None = None,
    default_cpu_quota: float | None = None,
) -> PoolState:
    teams = {
        t.id: TeamState(
            id=t.id,
            name=t.name,
            weight=t.weight,
            gpu_quota=t.gpu_quota if t.gpu_quota is not None else default_gpu_quota,
            cpu_quota=t.cpu_quota if t.cpu_quota is not None else default_cpu_quota,
            max_jobs=t.max_concurrent_jobs if t.max_concurrent_jobs is not None else default_max_jobs,
        )
        for t in session.scalars(select(Team))
    }
    cpus = gpus = 0.0
    finished = finished_trials(session)
    active = select(
        Job.id, Job.team_id, Job.cpus_per_trial, Job.gpus_per_trial, Job.max_concurrent_trials, Job.n_trials
    ).where(Job.state.in_(ACTIVE_STATES))
    for job_id, team_id, cpt, gpt, conc, n in session.execute(active):
        team = teams[team_id]
        running = concurrency(cpt, gpt, conc, left_to_run(n, finished.get(job_id, 0)), capacity)
        team.gpus_in_use += gpt * running
        team.cpus_in_use += cpt * running
        team.jobs_running += 1
        cpus += cpt * running
        gpus += gpt * running
    queued: list[QueuedJob] = []
    reasons: dict[str, str | None] = {}
    queued_at: dict[str, datetime] = {}
    rows = select(
        Job.id,
        Job.team_id,
        Job.priority,
        Job.queued_at,
        Job.cpus_per_trial,
        Job.gpus_per_trial,
        Job.max_concurrent_trials,
        Job.n_trials,
        Job.wait_reason,
    ).where(Job.state == JobState.QUEUED)
    for job_id, team_id, prio, at, cpt, gpt, conc, n, reason in session.execute(rows):
        running = concurrency(cpt, gpt, conc, n, capacity)
        queued.append(
            QueuedJob(
                id=job_id,
                team_id=team_id,
                priority=prio,
                queued_at=at.timestamp(),
                cpus=cpt,
                gpus=gpt,
                footprint_cpus=cpt * running,
                footprint_gpus=gpt * running,
            )
        )
        reasons[job_id] = reason
        queued_at[job_id] = at
    counts = select(Job.team_id, func.count()).where(Job.state == JobState.QUEUED).group_by(Job.team_id)
    jobs_queued = {team_id: int(n) for team_id, n in session.execute(counts)}
    return PoolState(queued, teams, Resources(cpus, gpus), jobs_queued, reasons, queued_at)


def free(capacity: Resources, reserved: Resources) -> Resources:
    return Resources(max(capacity.cpus - reserved.cpus, 0.0), max(capacity.gpus - reserved.gpus, 0.0))


def reach(capacity: Resources | None, autoscaler: Autoscaler | None) -> Resources | None:
    """What the pool can hold: its live capacity, or with an autoscaler the larger of it and what the
    autoscaler may add (its ceiling alone while the pool is unread). `load` and the estimates take this."""
    return capacity if autoscaler is None else autoscaler.reach(capacity)


def plan_round(state: PoolState, capacity: Resources | None, autoscaler: Autoscaler | None = None) -> Plan:
    """The scheduler's decision on `state`; with the capacity unknown, nothing is admitted. With an
    autoscaler a job is judged by the pool's reach, a job whose trial no node (type) holds waits with that
    reason, and an admitted job for whose first trial the live pool has no room now is told which node it
    waits for (`Plan.waits`, also on its reason)."""
    if capacity is None:
        order = sorted(state.queued, key=lambda j: (-j.priority, j.queued_at, j.id))
        reason = "pool unknown: the Ray cluster has not answered yet"
        return Plan(order=[j.id for j in order], reasons=dict.fromkeys((j.id for j in order), reason))
    teams = {k: replace(v) for k, v in state.teams.items()}  # the plan updates its copy
    if autoscaler is None:
        return scheduler.plan(state.queued, teams, free(capacity, state.reserved), capacity)
    total = autoscaler.reach(capacity)
    never = {j.id: f"pool too small: {why}" for j in state.queued
             if (why := autoscaler.too_large(j.cpus, j.gpus, capacity))}  # fmt: skip
    decided = scheduler.plan(state.queued, teams, free(total, state.reserved), total, never)
    live = Resources(capacity.cpus - state.reserved.cpus, capacity.gpus - state.reserved.gpus)  # room now
    jobs = {j.id: j for j in state.queued}
    for job_id in decided.admitted:
        job = jobs[job_id]
        if wait := autoscaler.waits_for(job.cpus, job.gpus, live):
            decided.waits[job_id] = wait
            decided.reasons[job_id] = f"{decided.reasons[job_id]}; {wait}"
        live = Resources(live.cpus - job.footprint_cpus, live.gpus - job.footprint_gpus)
    return decided
