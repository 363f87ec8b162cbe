"""The shared pool: capacity, what each team holds, and the queue in order with each job's reason."""

from __future__ import annotations

from fastapi import APIRouter

from service import pool
from service.api.deps import CurrentKey, EngineDep, SessionDep, SettingsDep
from service.schemas import PoolPublic, QueueEntry, QueuePublic, ResourcesPublic, TeamUsage

router = APIRouter(prefix="/pool", tags=["pool"])


@router.get("", response_model=PoolPublic)
def read_pool(session: SessionDep, _key: CurrentKey, engine: EngineDep, settings: SettingsDep) -> PoolPublic:
    """The pool's capacity (from the Ray cluster), what is reserved and free, and each team's usage."""
    state = pool.load(session, default_max_jobs=settings.default_max_concurrent_jobs)
    capacity = engine.capacity
    teams = [
        TeamUsage(
            team=t.name,
            gpus_in_use=t.gpus_in_use,
            gpu_quota=t.gpu_quota,
            jobs_running=t.jobs_running,
            max_concurrent_jobs=t.max_jobs or settings.default_max_concurrent_jobs,
            jobs_queued=state.jobs_queued.get(t.id, 0),
            weight=t.weight,
            share=t.share()[0],
        )
        for t in sorted(state.teams.values(), key=lambda t: t.name)
    ]
    return PoolPublic(
        capacity=ResourcesPublic(**capacity._asdict()) if capacity else None,
        reserved=ResourcesPublic(**state.reserved._asdict()),
        free=ResourcesPublic(**pool.free(capacity, state.reserved)._asdict()) if capacity else None,
        teams=teams,
    )


@router.get("/queue", response_model=QueuePublic)
def read_queue(session: SessionDep, key: CurrentKey, engine: EngineDep, settings: SettingsDep) -> QueuePublic:
    """The queue in the order the scheduler considers it, with each job's reason for waiting."""
    state = pool.load(session, default_max_jobs=settings.default_max_concurrent_jobs)
    plan = pool.plan_round(state, engine.capacity)
    jobs = {j.id: j for j in state.queued}
    entries = []
    for position, job_id in enumerate(plan.order, start=1):
        job = jobs[job_id]
        reason = plan.reasons.get(job_id, "")
        if job_id in plan.admitted:
            reason = "next: admitted at the next scheduler round"
        visible = key.scope is None or key.scope == job.team_id
        entries.append(
            QueueEntry(
                position=position,
                job_id=job_id if visible else None,
                team=state.teams[job.team_id].name,
                priority=job.priority,
                cpus=job.cpus,
                gpus=job.gpus,
                queued_at=state.queued_at[job_id],
                reason=reason,
            )
        )
    return QueuePublic(data=entries, count=len(entries))
