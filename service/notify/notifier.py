"""The engine's webhook step: due deliveries posted in a small thread pool, off the scheduling loop.

Each engine round (the lease holder's, Ray reachable or not) calls `tick`: every minute the budget
thresholds (service.notify.budgets), every hour the pruning of events older than 30 days, then the due
PENDING deliveries, at most as many as the pool has free workers (SMARTUNE_WEBHOOK_CONCURRENCY). A
claimed delivery's `next_attempt_at` moves past the longest an attempt can take, so a control plane
killed mid-attempt tries it again after a restart (at least once: receivers dedupe by the event's `id`).
The round itself only reads and writes rows; the HTTP calls run in the pool's threads, which record each
attempt: DELIVERED on a 2xx, else retried after `backoff_s` until SMARTUNE_WEBHOOK_MAX_ATTEMPTS, then
FAILED.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from datetime import datetime, timedelta

import httpx
from sqlalchemy import delete, select, update

from service.config import Settings
from service.notify import budgets, deliver, urls
from service.store.db import Database, utcnow
from service.store.models import Team
from service.store.webhook_models import DeliveryState, Webhook, WebhookDelivery, WebhookEvent

logger = logging.getLogger(__name__)

BUDGETS_EVERY_S = 60.0
PRUNE_EVERY_S = 3600.0
KEEP_DAYS = 30  # delivered and failed deliveries are listed this long (budget events stay: they dedupe)


def backoff_s(attempts: int, base_s: float, max_s: float) -> float:
    """Seconds before the next attempt after `attempts` failed ones: base, 2 base, 4 base, ..., at most max."""
    return float(min(max_s, base_s * 2 ** max(0, attempts - 1)))


def record(row: WebhookDelivery, outcome: deliver.Outcome, settings: Settings, now: datetime) -> None:
    """One attempt's outcome on its delivery: delivered, due again after the backoff, or failed."""
    row.attempts += 1
    row.last_status, row.last_error, row.last_attempt_at = outcome.status, outcome.error, now
    if outcome.delivered:
        row.state, row.next_attempt_at = DeliveryState.DELIVERED, None
    elif row.attempts >= settings.webhook_max_attempts:
        row.state, row.next_attempt_at = DeliveryState.FAILED, None
    else:
        wait = backoff_s(row.attempts, settings.webhook_backoff_s, settings.webhook_backoff_max_s)
        row.next_attempt_at = now + timedelta(seconds=wait)


class Notifier:
    """`resolve` and `transport` are seams: the unit tests answer names from a table and requests with
    httpx's MockTransport."""

    def __init__(
        self,
        *,
        db: Database,
        settings: Settings,
        resolve: urls.Resolver = urls.system_resolve,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.db, self.settings, self.resolve, self.transport = db, settings, resolve, transport
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None  # made at the first delivery
        self._inflight: dict[int, concurrent.futures.Future[None]] = {}
        self._lock = threading.Lock()
        self._budgets_at = self._pruned_at = float("-inf")

    @property
    def lease_s(self) -> float:
        """The longest one attempt can take: resolving, then connect, write and read, each up to the timeout."""
        return 4 * self.settings.webhook_timeout_s + 30.0

    def tick(self) -> int:
        """One round's work; returns how many deliveries it started. Never raises: a bug is logged."""
        try:
            clock = time.monotonic()
            if clock - self._budgets_at >= BUDGETS_EVERY_S:
                self._budgets_at = clock
                with self.db.sessions() as session:
                    teams = budgets.subscribed_teams(session)
                if teams:  # a write transaction only when some team listens
                    with self.db.write_sessions() as session, session.begin():
                        budgets.check(session, self.settings, teams)
            if clock - self._pruned_at >= PRUNE_EVERY_S:
                self._pruned_at = clock
                self.prune()
            return self._start_due()
        except Exception:
            logger.exception("the webhook step failed; the next round tries again")
            return 0

    def prune(self, now: datetime | None = None) -> None:
        cutoff = (now or utcnow()) - timedelta(days=KEEP_DAYS)
        old = delete(WebhookEvent).where(WebhookEvent.created_at < cutoff, WebhookEvent.dedupe_key.is_(None))
        with self.db.write_sessions() as session, session.begin():
            session.execute(old)  # their deliveries go with them (ON DELETE CASCADE)

    def _start_due(self) -> int:
        with self._lock:
            self._inflight = {i: f for i, f in self._inflight.items() if not f.done()}
            free = self.settings.webhook_concurrency - len(self._inflight)
        if free <= 0:
            return 0
        now = utcnow()
        due = (
            select(WebhookDelivery.id)
            .where(WebhookDelivery.state == DeliveryState.PENDING, WebhookDelivery.next_attempt_at <= now)
            .order_by(WebhookDelivery.next_attempt_at, WebhookDelivery.id)
            .limit(free)
        )
        with self.db.sessions() as session:  # a read first: most rounds find nothing due
            if not session.scalars(due).first():
                return 0
        with self.db.write_sessions() as session, session.begin():
            ids = list(session.scalars(due).all())
            claimed = update(WebhookDelivery).where(WebhookDelivery.id.in_(ids))
            session.execute(claimed.values(next_attempt_at=now + timedelta(seconds=self.lease_s)))
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.settings.webhook_concurrency, thread_name_prefix="smartune-webhook"
                )
            for delivery_id in ids:
                self._inflight[delivery_id] = self._pool.submit(self._run, delivery_id)
        return len(ids)

    def drain(self, timeout_s: float = 30.0) -> None:
        """Wait for the attempts in flight (tests; stopping)."""
        with self._lock:
            pending = list(self._inflight.values())
        concurrent.futures.wait(pending, timeout=timeout_s)

    def stop(self) -> None:
        self.drain(2 * self.settings.webhook_timeout_s)  # an attempt cut short is tried again after its lease
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, delivery_id: int) -> None:
        try:
            self.run_one(delivery_id)
        except Exception:
            logger.exception("webhook delivery %s failed; it is tried again after its lease", delivery_id)

    def run_one(self, delivery_id: int) -> deliver.Outcome | None:
        """One attempt of a PENDING delivery, recorded; None when there is none (done, or deleted)."""
        with self.db.sessions() as session:
            row = session.get(WebhookDelivery, delivery_id)
            hook = session.get(Webhook, row.webhook_id) if row is not None else None
            if row is None or hook is None or row.state != DeliveryState.PENDING:
                return None
            team = session.get(Team, hook.team_id)
            event = row.event
            content = deliver.body(
                event.id, event.type, event.created_at.isoformat(), team.name if team else "", event.payload
            )
            url, secret, event_type = hook.url, hook.secret, event.type
        outcome = deliver.attempt(
            url=url,
            secret=secret,
            content=content,
            event_type=event_type,
            delivery_id=delivery_id,
            settings=self.settings,
            resolve=self.resolve,
            transport=self.transport,
        )
        with self.db.write_sessions() as session, session.begin():
            row = session.get(WebhookDelivery, delivery_id)
            if row is not None:  # else its webhook was deleted meanwhile
                record(row, outcome, self.settings, utcnow())
        if not outcome.delivered:
            logger.info("webhook delivery %s: %s", delivery_id, outcome.error)
        return outcome
