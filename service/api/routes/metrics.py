"""`GET /metrics`: the Prometheus exposition of the app's registry (service.http.metrics).

Readable with an admin key or with the deployment's metrics token (`SMARTUNE_METRICS_TOKEN`), both as
`Authorization: Bearer ...` (Prometheus' scrape config `authorization: {credentials: ...}`). No key: 401;
an unknown or revoked key: 401; a team's key: 403 (the metrics name every team). Scrapes are not rate
limited (a scraper polls on its own schedule; the key or token is checked first) and the route is not in
the OpenAPI document (it is not part of the tenants' API). The route is plain `def`: the collector reads
the job store, in the thread pool.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from prometheus_client.exposition import choose_encoder

from service.api.deps import Credentials, KeyCacheDep, SessionDep, SettingsDep, authenticate
from service.errors import ApiError

router = APIRouter(include_in_schema=False)


def _token_matches(given: str, token: str | None) -> bool:
    return bool(token) and hmac.compare_digest(given.encode(), str(token).encode())


async def require_metrics_reader(
    session: SessionDep, cache: KeyCacheDep, settings: SettingsDep, credentials: Credentials
) -> str:
    """Who reads the metrics: `token` (the metrics token) or the admin key's id."""
    if credentials is None:
        raise ApiError(
            401, "missing credentials: send 'Authorization: Bearer <admin key or metrics token>'",
            headers={"WWW-Authenticate": "Bearer"},
        )  # fmt: skip
    if _token_matches(credentials.credentials, settings.metrics_token):
        return "token"
    principal = await authenticate(session, cache, credentials)
    if principal is None:
        raise ApiError(401, "invalid or revoked credentials", headers={"WWW-Authenticate": "Bearer"})
    if not principal.is_admin:
        raise ApiError(403, "/metrics needs an admin key or the deployment's metrics token")
    return principal.key_id


MetricsReader = Annotated[str, Depends(require_metrics_reader)]


@router.get("/metrics", include_in_schema=False)
def read_metrics(request: Request, _reader: MetricsReader) -> Response:
    """This app's registry in the format the scraper asks for: OpenMetrics, else Prometheus text 0.0.4."""
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encode(request.app.state.metrics.registry), media_type=content_type)
