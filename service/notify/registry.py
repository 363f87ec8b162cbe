"""The teams' webhooks, for the routes: register (the URL checked, the secret made), list, delete, and a
webhook's deliveries. A team's key sees and manages only its team's webhooks (another team's is a 404, as
if it did not exist); an admin key sees every team's. Plain functions on a session; the caller commits."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.config import Settings
from service.errors import ApiError
from service.notify import signing, urls
from service.notify.schemas import DeliveryPublic, WebhookCreate, WebhookCreated, WebhookPublic
from service.store.models import Team
from service.store.webhook_models import Webhook, WebhookDelivery


def check_url(url: str, settings: Settings, resolve: urls.Resolver) -> None:
    """422 naming `url` when a webhook may not reach it (a DNS lookup: call it off the event loop)."""
    try:
        urls.check(url, settings, resolve)
    except urls.UrlRefused as err:
        raise ApiError(422, f"url: {err}", field="url") from None


def create(
    *, session: Session, settings: Settings, team: Team, body: WebhookCreate, created_by: str
) -> WebhookCreated:
    """Register a webhook of `team` (its URL already checked); the answer holds its secret, once."""
    count = session.scalar(select(func.count()).select_from(Webhook).where(Webhook.team_id == team.id)) or 0
    if count >= settings.webhook_max_per_team:
        limit = settings.webhook_max_per_team
        raise ApiError(409, f"team {team.name} has {count} webhooks; the limit is {limit} (delete one first)")
    events = list(dict.fromkeys(body.events))  # each once, in the order given
    hook = Webhook(
        team_id=team.id, url=body.url, events=events, secret=signing.new_secret(), created_by=created_by
    )
    session.add(hook)
    session.flush()
    return WebhookCreated(**public(hook, team.name).model_dump(), secret=hook.secret)


def visible(*, session: Session, scope: int | None, webhook_id: int) -> Webhook:
    """The webhook if the caller may see it (`scope`: its team, None for admins); 404 otherwise."""
    hook = session.get(Webhook, webhook_id)
    if hook is None or (scope is not None and hook.team_id != scope):
        raise ApiError(404, f"webhook {webhook_id} not found")
    return hook


def listed(*, session: Session, scope: int | None) -> list[WebhookPublic]:
    """The caller's team's webhooks (every team's for admins), oldest first."""
    query = select(Webhook, Team.name).join(Team, Team.id == Webhook.team_id).order_by(Webhook.id)
    if scope is not None:
        query = query.where(Webhook.team_id == scope)
    return [public(hook, team) for hook, team in session.execute(query)]


def team_name(session: Session, hook: Webhook) -> str:
    team = session.get(Team, hook.team_id)
    return team.name if team else ""


def deliveries(*, session: Session, hook: Webhook, limit: int) -> tuple[Sequence[WebhookDelivery], int]:
    """The webhook's latest `limit` deliveries, newest first, and how many it has."""
    where = WebhookDelivery.webhook_id == hook.id
    count = session.scalar(select(func.count()).select_from(WebhookDelivery).where(where)) or 0
    query = select(WebhookDelivery).where(where).order_by(WebhookDelivery.id.desc()).limit(limit)
    return session.scalars(query).unique().all(), count


def public(hook: Webhook, team: str) -> WebhookPublic:
    return WebhookPublic(
        id=hook.id,
        team=team,
        url=hook.url,
        events=list(hook.events),
        created_by=hook.created_by,
        created_at=hook.created_at,
    )


def delivery_public(row: WebhookDelivery) -> DeliveryPublic:
    return DeliveryPublic(
        id=row.id,
        event_id=row.event_id,
        event=row.event.type,
        state=row.state,
        attempts=row.attempts,
        last_status=row.last_status,
        last_error=row.last_error,
        last_attempt_at=row.last_attempt_at,
        next_attempt_at=row.next_attempt_at,
        created_at=row.created_at,
    )
