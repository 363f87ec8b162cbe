"""The engine: one background thread that reconciles with Ray, syncs trials and dispatches the queue.

Each round reads the pool's capacity (cached for `capacity_ttl_s`), watches every dispatched or running
job (service.engine.watch), finishes cancellations, then runs the scheduler and dispatches what it admits
(service.engine.dispatch) when anything it depends on changed: a submission or cancellation, a job that ended or
was lost, the pool's capacity; otherwise every `RESCHEDULE_S`. The first round after a start is the
reconciliation with Ray: no job is dispatched before every non-final job has been looked up. Ray being
unreachable only postpones a round. Among several replicas only the holder of the engine lease
(service.engine.lease) runs rounds; the others stand by, reading only the pool's capacity, which every replica's
submissions are judged by (`known_capacity`). The holder also runs the storage step at most every
`storage_refresh_s` (service.storage.keeper: finished jobs' checkpoint retention, then each team's disk
measured for the storage quotas), Ray reachable or not, and the webhook step (service.notify.notifier:
due deliveries handed to its own threads, so no HTTP call holds up a round). With MLflow users per team it
also provisions every team not provisioned yet (service.engine.mlflow_teams).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from service.config import Settings
from service.engine import lease, pool_peak
from service.engine.dispatch import Dispatcher
from service.engine.mlflow_teams import TeamAccess
from service.engine.ray_jobs import RayJobs, RayUnavailable
from service.engine.scheduler import Resources
from service.engine.tracking import Tracker
from service.engine.watch import Watcher
from service.notify.notifier import Notifier
from service.storage.keeper import Keeper
from service.store import crud
from service.store.db import Database

logger = logging.getLogger(__name__)

MIN_ROUND_GAP_S = 0.25  # a burst of submissions wakes the engine once, not once each
RESCHEDULE_S = (
    30.0  # with nothing new (no submission, no job ending, same capacity) scheduling waits this long
)


class Engine:
    def __init__(
        self,
        *,
        db: Database,
        ray: RayJobs,
        tracker: Tracker,
        settings: Settings,
        access: TeamAccess | None = None,
    ) -> None:
        self.db, self.ray, self.tracker, self.settings = db, ray, tracker, settings
        self.access = access  # MLflow users per team (service.engine.mlflow_teams); None: none to make
        self.holder = lease.holder_id()
        self.leading = False
        self.dispatcher = Dispatcher(db=db, ray=ray, settings=settings, access=access)
        self.watcher = Watcher(
            db=db, ray=ray, tracker=tracker, settings=settings, resubmit=self.dispatcher.submit
        )
        self.storage = Keeper(db=db, settings=settings)  # disk measured, checkpoints retained
        self.notifier = Notifier(db=db, settings=settings)  # webhook deliveries, in its own threads
        self.capacity: Resources | None = None
        self.capacity_error: str | None = None  # why the last read of the capacity failed, if it did
        self._peak: pool_peak.Peak | None = None  # the most the pool has offered (service.engine.pool_peak)
        self.reconciled = False
        self.last_error: str | None = None
        self._capacity_at = self._scheduled_at = float("-inf")
        self._failed_at = float("-inf")  # the last read of the capacity that Ray did not answer
        self._capacity_lock = threading.Lock()  # one read at a time: the rounds' and a submission's
        self._scheduled_for: Resources | None = None
        self._dirty = True
        self._stop, self._wake = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="smartune-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.notifier.stop()
        if self.leading:
            try:
                lease.release(self.db.write_sessions, lease.ENGINE_LEASE, self.holder)
            except Exception:  # the lease lapses by itself
                logger.exception("could not release the engine lease")

    def wake(self) -> None:
        """Run the next round now, scheduling included (after a submission or a cancellation)."""
        self._dirty = True
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            self.tick()
            self._wake.wait(self.settings.scheduler_interval_s)
            self._stop.wait(MIN_ROUND_GAP_S)

    def tick(self) -> None:
        """One round: capacity, reconcile/watch, cancellations, scheduling (the lease holder only)."""
        try:
            was_leading = self.leading
            self.leading = lease.acquire(
                self.db.write_sessions, lease.ENGINE_LEASE, self.holder, self.settings.engine_lease_s
            )
            if not self.leading:
                with contextlib.suppress(RayUnavailable):  # its submissions are judged by the pool too
                    self.refresh_capacity()
                self.last_error = "standing by: another replica holds the engine lease"
                return
            if not was_leading:
                self.reconciled = False  # a new leader first looks every job up
            self.refresh_capacity()
            if not self.reconciled:
                self._ensure_experiment()
            capacity = self.capacity
            losses = self.watcher.losses
            ended = self.watcher.poll_active()
            if self.watcher.losses != losses:
                capacity = self._capacity_after_loss()
            self.watcher.finish_cancelled()
            self.reconciled = True
            stale = time.monotonic() - self._scheduled_at > RESCHEDULE_S
            if capacity is None:
                self._dirty = True  # scheduled on a later round, by a capacity Ray has answered since
            elif self._dirty or ended or capacity != self._scheduled_for or stale:
                self._dirty = False  # cleared first: a submission during the round asks for another
                self.dispatcher.schedule(capacity)
                self._scheduled_at, self._scheduled_for = time.monotonic(), capacity
            self.last_error = self.capacity_error  # None when the round met no trouble
        except RayUnavailable as err:
            self.last_error = str(err)
            logger.warning("engine round postponed: %s", err)
        except Exception as err:  # a bug must not kill the loop
            self.last_error = repr(err)
            logger.exception("engine round failed")
        if self.leading:  # Ray down or not: retention and the teams' disk, every storage_refresh_s at most
            self.storage.tick()
            self.notifier.tick()  # due webhook deliveries started (never blocks on HTTP), budgets checked
            self._provision_teams()

    def _provision_teams(self) -> None:
        """New teams' MLflow users, experiments and grants (service.engine.mlflow_teams), Ray down or not."""
        if self.access is None:
            return
        try:
            with self.db.sessions() as session:
                teams = [team.name for team in crud.list_teams(session=session)]
        except Exception:
            logger.exception("could not list the teams to provision their MLflow users")
            return
        self.access.ensure_teams(teams)

    def refresh_capacity(self, force: bool = False) -> Resources | None:
        """The pool's capacity, read again once `capacity_ttl_s` has passed. A failed read keeps the last
        known capacity (the round goes on: watching needs none) until a first one was ever read."""
        with self._capacity_lock:
            if force or time.monotonic() - self._capacity_at >= self.settings.capacity_ttl_s:
                try:
                    self.capacity, self.capacity_error = self.ray.capacity(), None
                    self._record_peak(self.capacity)
                except RayUnavailable as err:
                    self._failed_at = time.monotonic()
                    if self.capacity is None:
                        raise
                    self.capacity_error = f"capacity unreadable, the last known is used: {err}"
                    logger.warning("%s", self.capacity_error)
                self._capacity_at = time.monotonic()
        return self.capacity

    def _capacity_after_loss(self) -> Resources | None:
        """The pool read again after a job was lost, or None while Ray cannot say. A lost job means a head
        restarted: its worker nodes rejoin seconds to minutes later, and a retry dispatched by the pool as
        it was before the loss would start a driver that finds no node to run its trials on."""
        self.refresh_capacity(force=True)
        return None if self.capacity_error is not None else self.capacity

    def _record_peak(self, capacity: Resources) -> None:
        """Keep the most the pool has offered (service.engine.pool_peak: `admin create-team` warns by it)."""
        try:
            self._peak = pool_peak.record(self.settings.data_dir, capacity, self._peak)
        except OSError as err:  # a hint for a warning: never a reason for the round to fail
            logger.warning("could not record the pool's peak in %s: %s", self.settings.data_dir, err)

    def known_capacity(self) -> Resources | None:
        """The pool as last read; when it never was, read now (or wait for the round's read under way), so
        a submission right after start is judged by the pool rather than let through. None while Ray cannot
        tell (unreachable, or a fresh head listing no node yet): admission then judges by the largest node
        the deployment declares (service.admission). A Ray call: not on the event loop."""
        # While Ray fails, the rounds keep trying; submissions ask it at most once per TTL themselves.
        if self.capacity is None and time.monotonic() - self._failed_at >= self.settings.capacity_ttl_s:
            with contextlib.suppress(RayUnavailable):
                self.refresh_capacity()
        return self.capacity

    def _ensure_experiment(self) -> None:
        try:
            self.tracker.ensure_experiment()
        except Exception:
            logger.exception("MLflow experiment %r unavailable", self.settings.mlflow_experiment)
