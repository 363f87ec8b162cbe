"""Audits of a finished job: re-run chosen trials from their MLflow records and compare (issue 10).

An audit is a job of kind `audit` (`Job.audit_of` names the audited job): it is queued under the team's
quota, scheduled and dispatched like any job, and its Ray job runs the worker's audit entrypoint
(`python -m worker.tune.audit`, see `entrypoint`) on the audited trials' MLflow runs. The entrypoint's
report (PASS, FAIL or NOT-COMPARABLE per trial, each metric recorded vs re-run, each provenance field
recorded vs now) becomes the audit job's summary, and is also logged on the audited job's parent run.
An audit is admitted as a submission is (service.admission): its estimate, what the audited trials' runs
took, must fit the team's budget; its trials the team's quotas; its priority, the audited job's, is lowered
to the team's maximum if that is lower now. Plain functions on a session; the routes are in
service/api/routes/audits.py.
"""

from __future__ import annotations

import hashlib
import json
import math
import shlex
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service import admission
from service.config import Settings
from service.costs import budget
from service.engine.scheduler import Resources
from service.errors import ApiError
from service.schemas import AuditRequest
from service.store import crud
from service.store.models import Job, JobKind, JobState, Trial

AUDIT_MODULE = "worker.tune.audit"
MAX_AUDITS_PER_JOB = 50  # stored audits of one job: re-running a trial costs a trial's compute


def _audited_runs(session: Session, job: Job, request: AuditRequest) -> list[Trial]:
    """The trial rows to re-run: those named (each must have finished an epoch), else the best one (of
    trials tied on their best score, the first by trial id: the same one on every request)."""
    rows = {t.trial_id: t for t in session.scalars(select(Trial).where(Trial.job_id == job.id))}
    usable = {tid: t for tid, t in rows.items() if t.mlflow_run_id and t.best_score is not None}
    if request.trials is None:
        if not usable:
            raise ApiError(409, f"job {job.id} has no trial with a finished epoch to audit")
        ranked = sorted(usable.values(), key=lambda t: t.trial_id)
        return [max(ranked, key=lambda t: float(t.best_score or -math.inf))]
    chosen = []
    for i, trial_id in enumerate(request.trials):
        if trial_id not in rows:
            raise ApiError(422, f"job {job.id} has no trial {trial_id!r}", field=f"body.trials.{i}")
        if trial_id not in usable:
            raise ApiError(
                422, f"trial {trial_id!r} finished no epoch: nothing to compare", field=f"body.trials.{i}"
            )
        chosen.append(usable[trial_id])
    return list({t.trial_id: t for t in chosen}.values())  # each once, in the order named


def _rerun_hours(runs: list[Trial], units_per_trial: float) -> float | None:
    """Device-hours re-running `runs` takes: what their MLflow runs took (wall seconds x units per trial);
    None when a run's wall time is unknown (admitted: it counts once it runs, as an unpriced job does)."""
    seconds = [t.wall_s for t in runs]
    if any(s is None for s in seconds):
        return None
    return sum(float(s or 0.0) for s in seconds) * units_per_trial / 3600


def submit_audit(
    *,
    session: Session,
    settings: Settings,
    job: Job,
    request: AuditRequest,
    capacity: Resources | None = None,
) -> Job:
    """Queue an audit of `job` (a SUCCEEDED sweep of the caller's team); return the audit job."""
    if job.kind != JobKind.SWEEP:
        raise ApiError(409, f"job {job.id} is an audit itself; audit the job it audited ({job.audit_of})")
    if job.state != JobState.SUCCEEDED:
        raise ApiError(409, f"job {job.id} is {job.state}; an audit re-runs the trials of a SUCCEEDED job")
    runs = _audited_runs(session, job, request)
    if len(list_audits(session=session, job_id=job.id)) >= MAX_AUDITS_PER_JOB:
        raise ApiError(409, f"job {job.id} has {MAX_AUDITS_PER_JOB} audits; that is the limit")
    plan = {
        "audit_of": job.id,
        "trials": [t.trial_id for t in runs],
        "run_ids": [t.mlflow_run_id for t in runs],
        "tolerance": request.tolerance,
    }
    document = json.dumps({"audit": plan}, sort_keys=True, separators=(",", ":"))
    audit = Job(
        id=crud.new_job_id(),
        team_id=job.team_id,
        name=f"audit of {job.name or job.id}"[:200],
        kind=JobKind.AUDIT,
        audit_of=job.id,
        state=JobState.QUEUED,
        priority=job.priority,
        spec_json=document,
        spec_hash=hashlib.sha256(document.encode()).hexdigest(),
        n_trials=len(runs),
        cpus_per_trial=job.cpus_per_trial,  # a trial re-run needs what the trial had
        gpus_per_trial=job.gpus_per_trial,
        max_concurrent_trials=1,  # the entrypoint re-runs the trials one after another
        cleanup_pending=False,
        attempt=0,
    )
    audit.device_unit = budget.unit_of(audit)
    audit.estimated_hours = _rerun_hours(runs, budget.units_per_trial(audit))  # reserved while it waits
    admitted = admission.admit(
        session, settings, job.team, admission.stored_ask(audit, audit.estimated_hours), capacity=capacity
    )
    audit.priority = admitted.priority
    reason = f"audit of {job.id} submitted" + (f"; {admitted.note}" if admitted.note else "")
    session.add(audit)
    crud.record_transition(session=session, job=audit, from_state=None, reason=reason)
    session.commit()
    return audit


def list_audits(*, session: Session, job_id: str) -> list[Job]:
    query = select(Job).where(Job.audit_of == job_id).order_by(Job.created_at.desc(), Job.id)
    return list(session.scalars(query))


def entrypoint(job: Job, python: str) -> str:
    """The Ray job's command of an audit job: the audit entrypoint on the audited trials' runs."""
    plan: dict[str, Any] = json.loads(job.spec_json)["audit"]
    parts = [python, "-m", AUDIT_MODULE, "--job-id", plan["audit_of"], "--audit-id", job.id]
    for run_id in plan["run_ids"]:
        parts += ["--run-id", run_id]
    if plan.get("tolerance") is not None:
        parts += ["--tolerance", repr(float(plan["tolerance"]))]
    return " ".join(shlex.quote(p) for p in parts)
