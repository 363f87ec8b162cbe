"""Watching dispatched jobs: reconcile each with Ray, sync its trials from MLflow, record how it ended.

For every DISPATCHED or RUNNING job the current attempt's Ray job is looked up: pending or running -> keep
watching (and sync the trial rows); finished -> record SUCCEEDED (with the sweep summary) or FAILED;
vanished -> LOST, then QUEUED again as the next attempt (or FAILED after `max_attempts`). Cancelled jobs
get their Ray job stopped and their open MLflow runs ended as KILLED. Ray is called outside transactions;
what it says is written only if the job has not changed meanwhile.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service import crud
from service.config import Settings
from service.db import Database, utcnow
from service.dispatch import mark_submitted
from service.models import ACTIVE_STATES, AttemptState, Job, JobState, submission_id
from service.ray_jobs import RAY_FINAL, RayJobs, RayUnavailable
from service.sync import apply_runs, stop_open_trials
from service.tracking import Tracker

logger = logging.getLogger(__name__)


class Watcher:
    def __init__(
        self,
        *,
        db: Database,
        ray: RayJobs,
        tracker: Tracker,
        settings: Settings,
        resubmit: Callable[[str, int], None],
    ) -> None:
        self.db, self.ray, self.tracker, self.settings = db, ray, tracker, settings
        self.resubmit = resubmit

    def _update(
        self, job_id: str, check: Callable[[Job], bool], change: Callable[[Session, Job], None]
    ) -> bool:
        return crud.update_job_if(sessions=self.db.write_sessions, job_id=job_id, check=check, change=change)

    def poll_active(self) -> int:
        """Reconcile every dispatched or running job; return how many left the pool (ended or lost)."""
        with self.db.sessions() as session:
            rows = session.execute(select(Job.id, Job.attempt).where(Job.state.in_(ACTIVE_STATES))).all()
        return sum(self.poll(job_id, number) for job_id, number in rows)

    def poll(self, job_id: str, number: int) -> bool:
        """Reconcile one job's attempt `number` with Ray; whether it left the pool."""
        with self.db.sessions() as session:
            job = crud.get_job(session=session, job_id=job_id, team_id=None)
            if job is None:
                return False
            attempt_state = crud.current_attempt(session=session, job=job).state
        info = self.ray.info(submission_id(job_id, number))
        same = lambda j: j.state in ACTIVE_STATES and j.attempt == number  # noqa: E731
        if info is None:
            if attempt_state == AttemptState.SUBMITTING:
                self.resubmit(job_id, number)  # recorded but never accepted by Ray
                return False
            return self._update(job_id, same, self._lost)
        if attempt_state == AttemptState.SUBMITTING:
            self._update(job_id, same, mark_submitted)
        if info.status == "RUNNING":
            self._update(job_id, same, _running)
        if info.status in ("RUNNING", *RAY_FINAL):
            self.sync_trials(job_id)
        return info.status in RAY_FINAL and self._finish(job_id, number, info.status, info.message)

    def _lost(self, session: Session, job: Job) -> None:
        attempt = crud.current_attempt(session=session, job=job)
        attempt.state, attempt.ended_at = AttemptState.LOST, utcnow()
        reason = f"Ray no longer knows {attempt.submission_id} (its head restarted?)"
        crud.set_state(session=session, job=job, state=JobState.LOST, reason=reason)
        if job.attempt >= self.settings.max_attempts:
            job.message = f"lost {job.attempt} times; giving up"
            crud.set_state(session=session, job=job, state=JobState.FAILED, reason=job.message)
        else:
            reason = f"requeued as attempt {job.attempt + 1}, resuming from {self.settings.tune_storage}"
            crud.set_state(session=session, job=job, state=JobState.QUEUED, reason=reason)

    def sync_trials(self, job_id: str) -> None:
        try:
            runs = self.tracker.job_runs(job_id)
        except Exception:
            logger.exception("trial sync of %s failed", job_id)
            return
        with self.db.write_sessions() as session, session.begin():
            apply_runs(session=session, job_id=job_id, runs=runs)

    def _finish(self, job_id: str, number: int, status: str, message: str | None) -> bool:
        sid = submission_id(job_id, number)
        summary = self._summary(job_id, sid) if status == "SUCCEEDED" else None
        tail = None if status == "SUCCEEDED" else self._logs_tail(sid)

        def change(session: Session, job: Job) -> None:
            attempt = crud.current_attempt(session=session, job=job)
            attempt.ray_status, attempt.message, attempt.ended_at = status, message, utcnow()
            if status == "SUCCEEDED":
                attempt.state = AttemptState.SUCCEEDED
                job.summary = summary
                best = (summary or {}).get("best") or {}
                value = best.get("value") if isinstance(best, dict) else None
                job.best_value = float(value) if isinstance(value, int | float) else None
                reason = f"sweep finished: {(summary or {}).get('trials_by_state', {})}"
                crud.set_state(session=session, job=job, state=JobState.SUCCEEDED, reason=reason)
                return
            attempt.state = AttemptState.FAILED if status == "FAILED" else AttemptState.STOPPED
            why = message or ("the Ray job was stopped outside smartune" if status == "STOPPED" else "failed")
            job.message = why + (f"\n--- last lines of the driver's log ---\n{tail}" if tail else "")
            crud.set_state(session=session, job=job, state=JobState.FAILED, reason=f"Ray job {status}: {why}")
            stop_open_trials(session=session, job_id=job.id)

        done = self._update(job_id, lambda j: j.state in ACTIVE_STATES and j.attempt == number, change)
        if done and status != "SUCCEEDED":
            self._end_runs(job_id, "FAILED")  # no run stays RUNNING after its driver died
        return done

    def _summary(self, job_id: str, sid: str) -> dict[str, Any] | None:
        try:
            found = self.tracker.summary(job_id)
        except Exception:
            logger.exception("summary of %s unavailable from MLflow", job_id)
            found = None
        if found is not None:
            return found
        for line in reversed(
            (self.ray.logs(sid) or "").strip().splitlines()[-5:]
        ):  # the driver prints it last
            try:
                parsed = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(parsed, dict) and "job_id" in parsed:
                return parsed
        return None

    def _logs_tail(self, sid: str, lines: int = 20) -> str | None:
        try:
            text = self.ray.logs(sid)
        except RayUnavailable:
            return None
        return "\n".join(text.strip().splitlines()[-lines:]) if text else None

    def _end_runs(self, job_id: str, status: str) -> bool:
        try:
            self.tracker.end_runs(job_id, status)
            return True
        except Exception:
            logger.exception("could not end the MLflow runs of %s", job_id)
            return False

    def finish_cancelled(self) -> None:
        """Stop cancelled jobs' Ray jobs; once stopped, end their open MLflow runs as KILLED."""
        with self.db.sessions() as session:
            query = select(Job.id, Job.attempt).where(Job.state == JobState.CANCELLED, Job.cleanup_pending)
            pending = session.execute(query).all()
        for job_id, number in pending:
            info = self.ray.info(submission_id(job_id, number)) if number else None
            if info is not None and info.status not in RAY_FINAL:
                self.ray.stop(submission_id(job_id, number))
                continue  # the next round ends the runs, once the driver has gone
            if not self._end_runs(job_id, "KILLED"):
                continue
            ray_status = info.status if info is not None else None

            def change(session: Session, job: Job, ray_status: str | None = ray_status) -> None:
                job.cleanup_pending = False
                if job.attempt:
                    attempt = crud.current_attempt(session=session, job=job)
                    if attempt.ended_at is None:
                        attempt.state, attempt.ended_at = AttemptState.STOPPED, utcnow()
                        attempt.ray_status = ray_status
                stop_open_trials(session=session, job_id=job.id)

            self._update(job_id, lambda j: j.cleanup_pending, change)


def _running(session: Session, job: Job) -> None:
    crud.set_state(session=session, job=job, state=JobState.RUNNING, reason="Ray job running")
