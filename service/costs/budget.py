"""Teams' device-hour budgets: what a team has used and committed in its rolling period, and the check at
submission.

A team may have a GPU-hour and a CPU-hour budget (`teams.gpu_hours_budget` / `cpu_hours_budget`, None: no
limit of that kind) over a rolling window of `budget_period_days` (its own, else SMARTUNE_BUDGET_PERIOD_DAYS;
30 by default). A job counts in the window it was submitted in, in its unit (gpu-hours when its trials
reserve GPUs, else cpu-hours):
- `used`: what its trials measurably held: each trial's MLflow run wall time x the GPUs (or CPUs) per
  trial; a finished job's actual is fixed when it ends;
- `reserved`: what queued and running jobs are still expected to take: their estimate less what they used.
A submission whose estimate exceeds budget - used - reserved is refused with 409 and the numbers. An
estimate that cannot be made (unknown data size, no calibration) is admitted: its trials count once they
run.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.config import Settings
from service.errors import ApiError
from service.store.db import utcnow
from service.store.models import ACTIVE_STATES, Job, JobState, Team, Trial

UNITS = ("gpu-hours", "cpu-hours")


def unit_of(job: Job) -> str:
    return job.device_unit or ("gpu-hours" if job.gpus_per_trial > 0 else "cpu-hours")


def units_per_trial(job: Job) -> float:
    return job.gpus_per_trial if job.gpus_per_trial > 0 else job.cpus_per_trial


def job_hours(session: Session, job: Job) -> float:
    """Device-hours the job's trials held so far: their runs' wall seconds x units per trial / 3600."""
    seconds = session.scalar(select(func.coalesce(func.sum(Trial.wall_s), 0.0)).where(Trial.job_id == job.id))
    return float(seconds or 0.0) * units_per_trial(job) / 3600


def record_actual(session: Session, job: Job) -> None:
    """A job that ended: fix its actual device-hours (called again when its trials are synced later)."""
    job.actual_hours = job_hours(session, job)
    job.device_unit = unit_of(job)


def period_days(team: Team, settings: Settings) -> float:
    return team.budget_period_days if team.budget_period_days is not None else settings.budget_period_days


def budget_of(team: Team, unit: str) -> float | None:
    return team.gpu_hours_budget if unit == "gpu-hours" else team.cpu_hours_budget


def usage(session: Session, team: Team, settings: Settings, now: datetime | None = None) -> dict[str, Any]:
    """Per unit: the budget, used and reserved hours and what is left, over the team's rolling period."""
    days = period_days(team, settings)
    since = (now or utcnow()) - timedelta(days=days)
    jobs = session.scalars(select(Job).where(Job.team_id == team.id, Job.created_at >= since)).all()
    seconds: dict[str, float | None] = dict(
        session.execute(
            select(Trial.job_id, func.coalesce(func.sum(Trial.wall_s), 0.0))
            .where(Trial.job_id.in_([j.id for j in jobs]))
            .group_by(Trial.job_id)
        ).all()
    )
    used, reserved = dict.fromkeys(UNITS, 0.0), dict.fromkeys(UNITS, 0.0)
    for job in jobs:
        unit = unit_of(job)
        measured = float(seconds.get(job.id) or 0.0) * units_per_trial(job) / 3600
        held = (
            job.actual_hours if job.actual_hours is not None and job.state not in ACTIVE_STATES else measured
        )
        used[unit] += held
        if job.state in (JobState.QUEUED, *ACTIVE_STATES) and job.estimated_hours is not None:
            reserved[unit] += max(0.0, job.estimated_hours - held)
    out: dict[str, Any] = {"period_days": days, "since": since.isoformat()}
    for unit in UNITS:
        budget = budget_of(team, unit)
        left = None if budget is None else budget - used[unit] - reserved[unit]
        out[unit] = {"budget": budget, "used": used[unit], "reserved": reserved[unit], "left": left}
    return out


def check(session: Session, team: Team, settings: Settings, plan: dict[str, Any]) -> dict[str, Any]:
    """The team's budget for the plan's unit, with the plan's estimate; 409 when it does not fit."""
    unit = plan["unit"]
    numbers = usage(session, team, settings)
    mine = numbers[unit]
    answer = {"unit": unit, "period_days": numbers["period_days"], "estimate": plan["device_hours"], **mine}
    left, estimate = mine["left"], plan["device_hours"]
    answer["fits"] = left is None or estimate is None or estimate <= left + 1e-9
    if not answer["fits"]:
        raise ApiError(
            409,
            f"the job's estimate of {estimate:.3f} {unit} exceeds what is left of the team's budget: "
            f"{mine['budget']:g} {unit} per {numbers['period_days']:g} days, {mine['used']:.3f} used, "
            f"{mine['reserved']:.3f} reserved by queued and running jobs, {left:.3f} left",
            extra={"budget": answer},
        )
    return answer
