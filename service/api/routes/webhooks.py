"""Webhooks: a team registers URLs to be told, signed, when its jobs end, its audits give a verdict or its
budget passes 80% or 100% (docs/webhooks.md); lists them, deletes them, and reads their deliveries.

Thin routes over service.notify.registry. A team's key sees only its team's webhooks (another team's is a
404); an admin key sees and deletes every team's, and registers none (a webhook belongs to a team)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from service.api.deps import CurrentKey, EngineDep, SessionDep, SettingsDep, TeamKey, WriteSessionDep
from service.api.responses import KEYED, errors
from service.errors import ApiError
from service.notify import registry
from service.notify.schemas import (
    DeliveriesPublic,
    WebhookCreate,
    WebhookCreated,
    WebhookPublic,
    WebhooksPublic,
)
from service.store.models import Team

router = APIRouter(prefix="/webhooks", tags=["webhooks"])
NOT_FOUND = {404: "no such webhook, or one of another team", 422: "the webhook id is not a whole number"}
WebhookId = Annotated[
    int, Path(ge=1, le=2**63 - 1, description="the webhook's id, as registering it answered")
]  # a 64-bit row id: a larger one is a 422, not a database overflow


@router.post(
    "",
    status_code=201,
    response_model=WebhookCreated,
    responses=errors(
        400,
        *KEYED,
        403,
        409,
        413,
        422,
        notes={
            403: "an admin key without a team: a webhook belongs to a team (register it with the team's key)",
            409: "the team has SMARTUNE_WEBHOOK_MAX_PER_TEAM webhooks already",
            422: "an unknown event type, or a URL a webhook may not reach (`url`: not http(s), a host that "
            "does not resolve, or a loopback, private, link-local or multicast address)",
        },
    ),
)
def create_webhook(
    body: WebhookCreate, session: WriteSessionDep, key: TeamKey, settings: SettingsDep, engine: EngineDep
) -> WebhookCreated:
    """Register a webhook of the key's team. The answer's `secret` signs every delivery
    (`Smartune-Signature`) and is shown this once."""
    registry.check_url(body.url, settings, engine.notifier.resolve)  # DNS: before the write transaction
    team = session.get(Team, key.team_id)
    if team is None:  # the team was deleted since the key was cached
        raise ApiError(403, "this key's team no longer exists")
    created = registry.create(session=session, settings=settings, team=team, body=body, created_by=key.key_id)
    session.commit()
    return created


@router.get("", response_model=WebhooksPublic, responses=errors(*KEYED))
def read_webhooks(session: SessionDep, key: CurrentKey) -> WebhooksPublic:
    """The team's webhooks (every team's for an admin key), oldest first; never their secrets."""
    data = registry.listed(session=session, scope=key.scope)
    return WebhooksPublic(data=data, count=len(data))


@router.get(
    "/{webhook_id}/deliveries",
    response_model=DeliveriesPublic,
    responses=errors(*KEYED, 404, 422, notes={**NOT_FOUND, 422: "a bad webhook id or `limit`"}),
)
def read_deliveries(
    webhook_id: WebhookId,
    session: SessionDep,
    key: CurrentKey,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> DeliveriesPublic:
    """The webhook's latest deliveries, newest first: state, attempts, last HTTP status or error, and when
    the next attempt is due."""
    hook = registry.visible(session=session, scope=key.scope, webhook_id=webhook_id)
    rows, count = registry.deliveries(session=session, hook=hook, limit=limit)
    return DeliveriesPublic(data=[registry.delivery_public(r) for r in rows], count=count)


@router.delete(
    "/{webhook_id}", response_model=WebhookPublic, responses=errors(*KEYED, 404, 422, notes=NOT_FOUND)
)
def delete_webhook(webhook_id: WebhookId, session: WriteSessionDep, key: CurrentKey) -> WebhookPublic:
    """Delete a webhook: its pending deliveries are dropped, nothing more is sent to it."""
    hook = registry.visible(session=session, scope=key.scope, webhook_id=webhook_id)
    deleted = registry.public(hook, registry.team_name(session, hook))
    session.delete(hook)
    session.commit()
    return deleted
