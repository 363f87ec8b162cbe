"""Budget thresholds as webhook events: a team's used device-hours at 80% and at 100% of its budget.

The engine's notifier calls `check` every minute for the teams with a webhook that receives `budget.80`
or `budget.100`. A threshold is told once per rolling budget period and unit (the event's `dedupe_key`):
a team that stays above it hears nothing more until a period has passed since it was told. `used` is what
the team's trials measurably held in the period (service.costs.budget.usage), not what queued jobs reserve.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.config import Settings
from service.costs import budget
from service.store import outbox
from service.store.db import utcnow
from service.store.models import Team
from service.store.webhook_models import Webhook, WebhookEvent

THRESHOLDS = (("budget.80", 0.8), ("budget.100", 1.0))  # (event type, fraction of the budget used)


def _told_since(session: Session, team_id: int, key: str, since: datetime) -> bool:
    query = select(WebhookEvent.id).where(
        WebhookEvent.team_id == team_id, WebhookEvent.dedupe_key == key, WebhookEvent.created_at >= since
    )
    return session.scalar(query.limit(1)) is not None


def subscribed_teams(session: Session) -> list[int]:
    """The teams with a webhook that receives a budget event."""
    kinds = {t for t, _level in THRESHOLDS}
    return sorted({h.team_id for h in session.scalars(select(Webhook)) if kinds & set(h.events)})


def check(
    session: Session, settings: Settings, teams: list[int] | None = None, now: datetime | None = None
) -> int:
    """Enqueue the thresholds the subscribed `teams` (default: all) have passed and not been told of;
    return how many events were written."""
    now = now or utcnow()
    told = 0
    for team_id in subscribed_teams(session) if teams is None else teams:
        team = session.get(Team, team_id)
        if team is None:
            continue
        numbers = budget.usage(session, team, settings, now)
        since = now - timedelta(days=numbers["period_days"])
        for unit in budget.UNITS:
            limit, used = numbers[unit]["budget"], numbers[unit]["used"]
            if not limit or limit <= 0:
                continue
            for event_type, level in THRESHOLDS:
                key = f"{event_type}:{unit}"
                if used < level * limit or _told_since(session, team_id, key, since):
                    continue
                data = {
                    "team": team.name,
                    "unit": unit,
                    "threshold_pct": round(level * 100),
                    "budget": limit,
                    "used": used,
                    "reserved": numbers[unit]["reserved"],
                    "period_days": numbers["period_days"],
                }
                if outbox.enqueue(session, team_id=team_id, event_type=event_type, data=data, dedupe_key=key):
                    told += 1
    return told
