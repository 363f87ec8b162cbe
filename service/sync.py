"""Trial rows from a job's MLflow runs (docs/architecture.md §2): upsert one row per Tune trial, keep the job's run ids."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from service.models import Job, Trial
from service.tracking import JobRuns

OPEN_TRIAL_STATES = ("PENDING", "RUNNING")


def apply_runs(*, session: Session, job_id: str, runs: JobRuns) -> int:
    """Upsert the job's trial rows from `runs`; return how many rows changed."""
    job = session.get(Job, job_id)
    if job is None:
        return 0
    if runs.experiment_id:
        job.mlflow_experiment_id = runs.experiment_id
    if runs.parent_run_id:
        job.mlflow_parent_run_id = runs.parent_run_id
    existing = {t.trial_id: t for t in session.scalars(select(Trial).where(Trial.job_id == job_id))}
    changed = 0
    for run in runs.trials:
        values = {
            "attempt": run.attempt,
            "state": run.state,
            "error_class": run.error_class,
            "params": run.params,
            "mlflow_run_id": run.run_id,
            "best_score": run.best_score,
            "last_epoch": run.last_epoch,
            "metrics": run.metrics,
        }
        row = existing.get(run.trial_id)
        if row is None:
            session.add(Trial(job_id=job_id, trial_id=run.trial_id, **values))
            changed += 1
        elif any(getattr(row, k) != v for k, v in values.items()):
            for k, v in values.items():
                setattr(row, k, v)
            changed += 1
    session.flush()
    return changed


def stop_open_trials(*, session: Session, job_id: str) -> None:
    """A job that ended without its trials ending (cancelled, failed) leaves them STOPPED."""
    query = (
        update(Trial)
        .where(Trial.job_id == job_id, Trial.state.in_(OPEN_TRIAL_STATES))
        .values(state="STOPPED")
    )
    session.execute(query)
