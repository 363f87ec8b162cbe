"""The shared pool: capacity, what each team holds, and the queue in order with each job's reason.

An admin sees every team. A team's key sees its own team in full and the other teams only as totals
(how many teams, GPUs in use, jobs running and queued): no names, quotas or job ids of other teams. In the
queue, other teams' jobs keep their place (a team sees how much waits ahead of it) without id, team or
reason. The routes are plain `def`: their queries run in the thread pool.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field
from sqlalchemy import select

from service.api.deps import CurrentKey, EngineDep, Principal, SessionDep, SettingsDep
from service.api.responses import KEYED, errors
from service.engine import pool
from service.engine.autoscaler import Autoscaler
from service.engine.scheduler import TeamState
from service.schemas import PoolPublic, QueueEntry, ResourcesPublic, TeamUsage
from service.storage import usage
from service.store.models import Team

router = APIRouter(prefix="/pool", tags=["pool"])


class OtherTeams(BaseModel):
    """The teams other than the caller's, added up."""

    teams: int
    gpus_in_use: float
    jobs_running: int
    jobs_queued: int


class PoolView(PoolPublic):
    others: OtherTeams | None = Field(
        None, description="for a team's key: the other teams, as totals (`teams` then lists its own only)"
    )


class QueueEntryView(QueueEntry):
    team: str | None = Field(description="null for other teams' jobs (for a team's key)")  # type: ignore[assignment]
    reason: str | None = Field(description="null for other teams' jobs (for a team's key)")  # type: ignore[assignment]


class QueueView(BaseModel):
    data: list[QueueEntryView]
    count: int


def _sees(key: Principal, team_id: int) -> bool:
    return key.scope is None or key.scope == team_id


def _load(session: SessionDep, engine: EngineDep, settings: SettingsDep) -> pool.PoolState:
    return pool.load(
        session,
        default_max_jobs=settings.default_max_concurrent_jobs,
        capacity=pool.reach(engine.capacity, Autoscaler.of(settings.autoscaled_node_types)),
        default_gpu_quota=settings.default_gpu_quota,
        default_cpu_quota=settings.default_cpu_quota,
    )


@router.get("", response_model=PoolView, responses=errors(*KEYED))
def read_pool(session: SessionDep, key: CurrentKey, engine: EngineDep, settings: SettingsDep) -> PoolView:
    """The pool's capacity (from the Ray cluster), what is reserved and free, and the teams' usage (GPUs,
    CPUs, jobs, and disk against the storage quota): every team for an admin, the caller's own team and the
    others' totals for a team's key."""
    state = _load(session, engine, settings)
    capacity = engine.capacity
    mine: list[TeamState] = []
    others: list[TeamState] = []
    for t in sorted(state.teams.values(), key=lambda t: t.name):
        (mine if _sees(key, t.id) else others).append(t)
    rows = session.scalars(select(Team).where(Team.id.in_([t.id for t in mine]))).all()
    disk = usage.usages(session, settings, rows)  # what each team keeps, against its storage quota
    teams = [
        TeamUsage(
            team=t.name,
            gpus_in_use=t.gpus_in_use,
            gpu_quota=t.gpu_quota,
            cpus_in_use=t.cpus_in_use,
            cpu_quota=t.cpu_quota,
            jobs_running=t.jobs_running,
            max_concurrent_jobs=t.max_jobs or settings.default_max_concurrent_jobs,
            jobs_queued=state.jobs_queued.get(t.id, 0),
            weight=t.weight,
            share=t.share()[0],
            storage=disk[t.id].public() if t.id in disk else None,
        )
        for t in mine
    ]
    totals = OtherTeams(
        teams=len(others),
        gpus_in_use=sum(t.gpus_in_use for t in others),
        jobs_running=sum((t.jobs_running for t in others), 0),
        jobs_queued=sum(state.jobs_queued.get(t.id, 0) for t in others),
    )
    return PoolView(
        capacity=ResourcesPublic(**capacity._asdict()) if capacity else None,
        reserved=ResourcesPublic(**state.reserved._asdict()),
        free=ResourcesPublic(**pool.free(capacity, state.reserved)._asdict()) if capacity else None,
        teams=teams,
        others=None if key.scope is None else totals,
    )


@router.get("/queue", response_model=QueueView, responses=errors(*KEYED))
def read_queue(session: SessionDep, key: CurrentKey, engine: EngineDep, settings: SettingsDep) -> QueueView:
    """The queue in the order the scheduler considers it, with each job's reason for waiting (other
    teams' jobs without id, team or reason for a team's key)."""
    state = _load(session, engine, settings)
    plan = pool.plan_round(state, engine.capacity, Autoscaler.of(settings.autoscaled_node_types))
    jobs = {j.id: j for j in state.queued}
    entries = []
    for position, job_id in enumerate(plan.order, start=1):
        job = jobs[job_id]
        visible = _sees(key, job.team_id)
        reason = plan.reasons.get(job_id, "")
        if job_id in plan.admitted:
            reason = "next: admitted at the next scheduler round"
        entries.append(
            QueueEntryView(
                position=position,
                job_id=job_id if visible else None,
                team=state.teams[job.team_id].name if visible else None,
                priority=job.priority,
                cpus=job.cpus,
                gpus=job.gpus,
                queued_at=state.queued_at[job_id],
                reason=reason if visible else None,
            )
        )
    return QueueView(data=entries, count=len(entries))
