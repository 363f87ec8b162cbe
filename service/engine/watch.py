"""Watching dispatched jobs: reconcile each with Ray, sync its trials from MLflow, record how it ended.

For every DISPATCHED or RUNNING job the current attempt's Ray job is looked up: pending or running -> keep
watching (and sync the trial rows); finished -> record SUCCEEDED (with the sweep summary) or FAILED;
unknown to Ray (a real 404) -> LOST, then QUEUED again as the next attempt (or FAILED once `max_attempts`
of its attempts were lost; attempts stopped by a planned stop, service.engine.planned_stop, do not count), after stopping the old submission so two attempts never run one experiment. Cancelled
jobs get their Ray job stopped and their open MLflow runs ended as KILLED.

Each job is watched on its own: an exception from one job's Ray or MLflow answer is logged and the other
jobs (and scheduling) go on. Every MLflow read has a timeout. Ray is called outside transactions; what it
says is written only if the job has not changed meanwhile. A job is SUCCEEDED only with at least one
completed trial; one whose summary could not be read when it ended keeps `summary_pending` and is read
again on later rounds.

A running job's trials are read from MLflow every round while reading all of them each round stays within
SMARTUNE_MLFLOW_SYNCS_PER_S (20 a second: 40 running jobs at the default 2-second rounds); beyond that each
is read at most every `running jobs / SMARTUNE_MLFLOW_SYNCS_PER_S` seconds, so the tracking server's load
stays bounded as the pool grows (a job whose Ray job ended is read at once).
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import json
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.config import Settings
from service.engine.dispatch import mark_submitted
from service.engine.outcomes import NO_SUMMARY, record_audit, record_summary
from service.engine.ray_jobs import RAY_FINAL, RayJobs, RayUnavailable
from service.engine.sync import apply_runs, stop_open_trials
from service.engine.tracking import Tracker
from service.http.logs import bound_job
from service.store import crud
from service.store.db import Database, utcnow
from service.store.models import ACTIVE_STATES, AttemptState, Job, JobKind, JobState, submission_id

logger = logging.getLogger(__name__)
T = TypeVar("T")
_MLFLOW = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="smartune-mlflow")


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
        self.losses = 0  # attempts found LOST since start: the engine reads the pool again after one
        self.clock: Callable[[], float] = time.monotonic
        self._synced_at: dict[str, float] = {}  # job id -> when its running trials were last read
        self._sync_gap_s = 0.0  # this round's least time between two reads of one running job's trials

    def _update(
        self, job_id: str, check: Callable[[Job], bool], change: Callable[[Session, Job], None]
    ) -> bool:
        return crud.update_job_if(sessions=self.db.write_sessions, job_id=job_id, check=check, change=change)

    def _mlflow(self, call: Callable[[], T]) -> T:
        """An MLflow read with the deployment's timeout (a hung tracking server stalls no round)."""
        context = contextvars.copy_context()  # the pool's threads log with the job's id too
        return _MLFLOW.submit(context.run, call).result(timeout=self.settings.mlflow_timeout_s)

    def poll_active(self) -> int:
        """Reconcile every dispatched or running job, each on its own; return how many left the pool or
        freed part of what they reserve (a trial of a job's last wave that ended): a reason to schedule."""
        with self.db.sessions() as session:
            rows = session.execute(select(Job.id, Job.attempt).where(Job.state.in_(ACTIVE_STATES))).all()
            pending = session.scalars(select(Job.id).where(Job.summary_pending)).all()
        gap = len(rows) / self.settings.mlflow_syncs_per_s  # 0 while every round may read every job:
        self._sync_gap_s = gap if gap > self.settings.scheduler_interval_s else 0.0  # as rounds come
        active = {job_id for job_id, _number in rows}
        self._synced_at = {job_id: at for job_id, at in self._synced_at.items() if job_id in active}
        left = 0
        for job_id, number in rows:
            with bound_job(job_id):  # its log lines carry its id
                try:
                    left += self.poll(job_id, number)
                except Exception as err:  # one odd job must not stall every team's
                    logger.warning(
                        "watching %s failed (%s); the other jobs go on", job_id, err, exc_info=True
                    )
        for job_id in pending:
            with bound_job(job_id):
                try:
                    self.fetch_summary(job_id)
                except Exception as err:
                    logger.warning("summary of %s still unavailable: %s", job_id, err)
        return left

    def poll(self, job_id: str, number: int) -> int:
        """Reconcile one job's attempt `number` with Ray; 1 when it left the pool, else the trials that
        ended for good since the last look."""
        with self.db.sessions() as session:
            job = crud.get_job(session=session, job_id=job_id, team_id=None)
            if job is None:
                return False
            attempt_state = crud.current_attempt(session=session, job=job).state
            experiment, started = job.mlflow_experiment, job.started_at
        sid = submission_id(job_id, number)
        info = self.ray.info(sid)
        same = lambda j: j.state in ACTIVE_STATES and j.attempt == number  # noqa: E731
        if info is None:
            if attempt_state == AttemptState.SUBMITTING:
                self.resubmit(job_id, number)  # recorded but never accepted by Ray
                return False
            self.ray.stop(sid)  # Ray says it does not know it; stop it anyway before a new attempt
            return self._update(job_id, same, self._lost)
        if attempt_state == AttemptState.SUBMITTING:
            self._update(job_id, same, mark_submitted)
        if info.status == "RUNNING":
            self._update(job_id, same, _running)
            if started is not None and utcnow() - started > timedelta(
                seconds=self.settings.max_job_wall_time_s
            ):
                return self._over_time(job_id, number)
        ended_trials = 0
        if info.status in RAY_FINAL or (info.status == "RUNNING" and self._due(job_id)):
            ended_trials = self.sync_trials(job_id, experiment)
        if info.status in RAY_FINAL and self._finish(job_id, number, info.status, info.message, experiment):
            return 1
        return ended_trials

    def _lost(self, session: Session, job: Job) -> None:
        attempt = crud.current_attempt(session=session, job=job)
        attempt.state, attempt.ended_at = AttemptState.LOST, utcnow()
        self.losses += 1
        reason = f"Ray no longer knows {attempt.submission_id} (its head restarted?)"
        crud.set_state(session=session, job=job, state=JobState.LOST, reason=reason)
        # Only losses count: an attempt ended by a planned stop (service.engine.planned_stop) is STOPPED.
        lost = crud.count_attempts(session=session, job=job, state=AttemptState.LOST)
        if lost >= self.settings.max_attempts:
            job.message = f"lost {lost} times; giving up"
            crud.set_state(session=session, job=job, state=JobState.FAILED, reason=job.message)
        else:
            reason = f"requeued as attempt {job.attempt + 1}, resuming from its checkpoints"
            crud.set_state(session=session, job=job, state=JobState.QUEUED, reason=reason)

    def _over_time(self, job_id: str, number: int) -> bool:
        limit = self.settings.max_job_wall_time_s
        self.ray.stop(submission_id(job_id, number))

        def change(session: Session, job: Job) -> None:
            attempt = crud.current_attempt(session=session, job=job)
            attempt.state, attempt.ended_at = AttemptState.STOPPED, utcnow()
            job.message = f"stopped after the deployment's maximum wall time of {limit:g} s"
            crud.set_state(session=session, job=job, state=JobState.FAILED, reason=job.message)
            stop_open_trials(session=session, job_id=job.id)

        done = self._update(job_id, lambda j: j.state in ACTIVE_STATES and j.attempt == number, change)
        if done:
            self._end_runs(job_id, "FAILED")
        return done

    def _due(self, job_id: str) -> bool:
        """Whether a running job's trials are read this round (see the module's docstring)."""
        now = self.clock()
        if now - self._synced_at.get(job_id, -float("inf")) < self._sync_gap_s:
            return False
        self._synced_at[job_id] = now
        return True

    def sync_trials(self, job_id: str, experiment: str | None = None) -> int:
        """Read the job's trials from MLflow; return how many ended for good since the last read."""
        try:
            runs = self._mlflow(lambda: self.tracker.job_runs(job_id, experiment))
        except Exception:
            logger.exception("trial sync of %s failed", job_id)
            return 0
        with self.db.write_sessions() as session, session.begin():
            return apply_runs(session=session, job_id=job_id, runs=runs)

    def _finish(
        self, job_id: str, number: int, status: str, message: str | None, experiment: str | None
    ) -> bool:
        sid = submission_id(job_id, number)
        summary = self._summary(job_id, sid, experiment) if status == "SUCCEEDED" else None
        tail = None if status == "SUCCEEDED" else self._logs_tail(sid)

        def change(session: Session, job: Job) -> None:
            attempt = crud.current_attempt(session=session, job=job)
            attempt.ray_status, attempt.message, attempt.ended_at = status, message, utcnow()
            if status == "SUCCEEDED":
                attempt.state = AttemptState.SUCCEEDED
                record_summary(session, job, summary)
                return
            attempt.state = AttemptState.FAILED if status == "FAILED" else AttemptState.STOPPED
            why = message or ("the Ray job was stopped outside smartune" if status == "STOPPED" else "failed")
            job.message = why + (f"\n--- last lines of the driver's log ---\n{tail}" if tail else "")
            crud.set_state(session=session, job=job, state=JobState.FAILED, reason=f"Ray job {status}: {why}")
            stop_open_trials(session=session, job_id=job.id)

        done = self._update(job_id, lambda j: j.state in ACTIVE_STATES and j.attempt == number, change)
        if done and status != "SUCCEEDED":
            self._end_runs(job_id, "FAILED", experiment)  # no run stays RUNNING after its driver died
        return done

    def fetch_summary(self, job_id: str) -> None:
        """A job that ended while MLflow was unreachable: read its summary and trials again."""
        with self.db.sessions() as session:
            job = session.get(Job, job_id)
            if job is None or not job.summary_pending:
                return
            experiment, kind, sid = job.mlflow_experiment, job.kind, job.submission_id
        if kind == JobKind.AUDIT:  # its report is the Ray job's last line
            report = self._summary(job_id, sid or "", experiment)
            if report is not None:
                self._update(job_id, lambda j: j.summary_pending, lambda s, j: record_audit(s, j, report))
            return
        summary = self._mlflow(lambda: self.tracker.summary(job_id, experiment))
        if summary is None:
            return
        self.sync_trials(job_id, experiment)
        self._update(job_id, lambda j: j.summary_pending, lambda s, j: record_summary(s, j, summary))

    def _summary(self, job_id: str, sid: str, experiment: str | None) -> dict[str, Any] | None:
        """The sweep's summary from MLflow, else from the driver's last lines; None while it cannot be
        read (it is fetched again later); `NO_SUMMARY` when MLflow and Ray both answered without one."""
        answered = True
        try:
            found = self._mlflow(lambda: self.tracker.summary(job_id, experiment))
        except Exception:
            logger.exception("summary of %s unavailable from MLflow", job_id)
            found, answered = None, False
        if found is not None:
            return found
        try:
            logs = self.ray.logs(sid) or ""
        except RayUnavailable:
            return None
        for line in reversed(logs.strip().splitlines()[-5:]):  # the driver prints it last
            try:
                parsed = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(parsed, dict) and "job_id" in parsed:
                return parsed
        return NO_SUMMARY if answered else None

    def _logs_tail(self, sid: str, lines: int = 20) -> str | None:
        try:
            text = self.ray.logs(sid)
        except RayUnavailable:
            return None
        return "\n".join(text.strip().splitlines()[-lines:]) if text else None

    def _end_runs(self, job_id: str, status: str, experiment: str | None = None) -> bool:
        try:
            self._mlflow(lambda: self.tracker.end_runs(job_id, status, experiment))
            return True
        except Exception:
            logger.exception("could not end the MLflow runs of %s", job_id)
            return False

    def finish_cancelled(self) -> None:
        """Stop cancelled jobs' Ray jobs; once stopped, end their open MLflow runs as KILLED."""
        with self.db.sessions() as session:
            query = select(Job.id, Job.attempt, Job.mlflow_experiment).where(
                Job.state == JobState.CANCELLED, Job.cleanup_pending
            )
            pending = session.execute(query).all()
        for job_id, number, experiment in pending:
            with bound_job(job_id):
                try:
                    self._finish_cancelled(job_id, number, experiment)
                except Exception as err:
                    logger.warning(
                        "cleaning up cancelled %s failed (%s); the next round retries", job_id, err
                    )

    def _finish_cancelled(self, job_id: str, number: int, experiment: str | None) -> None:
        info = self.ray.info(submission_id(job_id, number)) if number else None
        if info is not None and info.status not in RAY_FINAL:
            self.ray.stop(submission_id(job_id, number))
            return  # the next round ends the runs, once the driver has gone
        if not self._end_runs(job_id, "KILLED", experiment):
            return
        ray_status = info.status if info is not None else None

        def change(session: Session, job: Job) -> None:
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
