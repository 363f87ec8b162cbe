"""How a finished Ray job is recorded: a sweep's summary decides SUCCEEDED or FAILED (at least one trial
must have completed), an audit's report becomes its summary; either may be pending when it could not be
read yet (service.engine.watch reads it again on later rounds)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from service.engine.sync import stop_open_trials
from service.store import crud, outbox
from service.store.models import Job, JobKind, JobState
from worker.contract.outcome import completed_trials, no_result_reason, state_counts

NO_SUMMARY: dict[str, Any] = {"no_summary": True}  # the driver ended well but left no summary anywhere


def record_summary(session: Session, job: Job, summary: dict[str, Any] | None) -> None:
    """A finished sweep's verdict: SUCCEEDED with at least one completed trial, FAILED with none or with no
    summary at all; without a summary yet (MLflow unreachable), SUCCEEDED with the summary pending."""
    if job.kind == JobKind.AUDIT:
        record_audit(session, job, summary)
        return
    if summary is NO_SUMMARY:  # not a sweep that ran (a driver that never reached its end, or not ours)
        job.message = "the sweep driver exited without a summary: no trial result was recorded"
        crud.set_state(session=session, job=job, state=JobState.FAILED, reason=job.message)
        stop_open_trials(session=session, job_id=job.id)
        return
    job.summary, job.summary_pending = summary, summary is None
    best = (summary or {}).get("best") or {}
    value = best.get("value") if isinstance(best, dict) else None
    job.best_value = float(value) if isinstance(value, int | float) else None
    counts = (summary or {}).get("trials_by_state", {})
    if summary is not None and completed_trials(summary) == 0:
        job.message = no_result_reason(summary)  # the states and the failed trials' classes and reasons
        crud.set_state(session=session, job=job, state=JobState.FAILED, reason=job.message)
        stop_open_trials(session=session, job_id=job.id)
        return
    reason = (
        f"sweep finished: {state_counts(counts)}"
        if summary is not None
        else "sweep finished; its summary is pending"
    )
    crud.set_state(session=session, job=job, state=JobState.SUCCEEDED, reason=reason)


def record_audit(session: Session, job: Job, report: dict[str, Any] | None) -> None:
    """An audit's Ray job succeeded: its report (the entrypoint's last line) is the summary, its verdict
    in the reason; without a report it failed."""
    if report is None:  # Ray's logs could not be read now: read again later (fetch_summary)
        job.summary_pending = True
        crud.set_state(
            session=session, job=job, state=JobState.SUCCEEDED, reason="audit finished; its report is pending"
        )
        return
    if report is NO_SUMMARY or "verdict" not in report:
        job.message = "the audit exited without a report"
        job.summary_pending = False
        crud.set_state(session=session, job=job, state=JobState.FAILED, reason=job.message)
        return
    job.summary, job.summary_pending = report, False
    outbox.audit_verdict(session, job, report)  # the team's webhooks hear the verdict
    reasons = "; ".join(str(t.get("reason", "")) for t in report.get("trials", []))
    crud.set_state(
        session=session,
        job=job,
        state=JobState.SUCCEEDED,
        reason=f"audit {report['verdict']}: {reasons}"[:2000],
    )
