"""Trial rows from a job's MLflow runs (docs/architecture.md §2): upsert one row per Tune trial, keep the job's
run ids, fold finished trials' measured cost into the calibration table (service.costs.refresh) and, for a
job that ended, its actual device-hours."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from service.costs import budget, refresh
from service.engine.pool import DONE_TRIAL_STATES
from service.engine.tracking import JobRuns
from service.store.models import FINAL_STATES, Job, Trial

OPEN_TRIAL_STATES = ("PENDING", "RUNNING")


def apply_runs(*, session: Session, job_id: str, runs: JobRuns) -> int:
    """Upsert the job's trial rows from `runs`; return how many trials ended for good since the last sync
    (each frees the room its job reserved for it in its last wave: service.engine.pool.left_to_run)."""
    job = session.get(Job, job_id)
    if job is None:
        return 0
    if runs.experiment_id:
        job.mlflow_experiment_id = runs.experiment_id
    if runs.parent_run_id:
        job.mlflow_parent_run_id = runs.parent_run_id
    existing = {t.trial_id: t for t in session.scalars(select(Trial).where(Trial.job_id == job_id))}
    newly_done = 0
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
        if run.wall_s is not None:
            values["wall_s"] = run.wall_s
        row = existing.get(run.trial_id)
        was_done = row is not None and row.state in DONE_TRIAL_STATES
        if row is None:
            row = Trial(job_id=job_id, trial_id=run.trial_id, **values)
            session.add(row)
        elif any(getattr(row, k) != v for k, v in values.items()):
            for k, v in values.items():
                setattr(row, k, v)
        newly_done += run.state in DONE_TRIAL_STATES and not was_done
        refresh.learn(session, row, run)
    session.flush()
    if job.state in FINAL_STATES:  # trials read after the job ended: its actual hours again
        budget.record_actual(session, job)
    return newly_done


def stop_open_trials(*, session: Session, job_id: str) -> None:
    """A job that ended without its trials ending (cancelled, failed) leaves them STOPPED."""
    query = (
        update(Trial)
        .where(Trial.job_id == job_id, Trial.state.in_(OPEN_TRIAL_STATES))
        .values(state="STOPPED")
    )
    session.execute(query)
