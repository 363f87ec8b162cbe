"""The HTTP layer: one httpx client, the API prefix, the key, retries of 429 and 503, typed errors."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from smartune.errors import ServerUnreachable, SmartuneError

if TYPE_CHECKING:
    import httpx

API_PREFIX = "/api/v1"
RETRIED = (429, 503)  # the server says when to try again (Retry-After): rate limit, full queue, database down
DEFAULT_RETRY_S = 1.0  # when a 429/503 names no Retry-After


def retry_after(response: httpx.Response, cap_s: float) -> float:
    """Seconds to wait before the next try: the Retry-After header (seconds or an HTTP date), at most
    `cap_s`; DEFAULT_RETRY_S when there is none or it does not parse."""
    value = response.headers.get("retry-after", "").strip()
    seconds = DEFAULT_RETRY_S
    if value:
        try:
            seconds = float(value)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(value)
                seconds = when.timestamp() - time.time()
            except (TypeError, ValueError):
                seconds = DEFAULT_RETRY_S
    return min(max(seconds, 0.0), cap_s)


class Http:
    """Requests to one server. `http`, a ready httpx client (a FastAPI TestClient, say), is used as it
    is and not closed here; otherwise one is built on `url` with `transport` (tests pass one)."""

    def __init__(
        self,
        url: str,
        key: str | None,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        max_retry_wait_s: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        http: httpx.Client | None = None,
    ) -> None:
        import httpx

        self.retries = retries
        self.max_retry_wait_s = max_retry_wait_s
        self._auth = {"Authorization": f"Bearer {key}"} if key else {}
        self._owned = http is None
        self.client = (
            http if http is not None else httpx.Client(base_url=url, timeout=timeout, transport=transport)
        )

    @property
    def base_url(self) -> str:
        return str(self.client.base_url).rstrip("/")

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        content: Callable[[], Iterable[bytes]] | None = None,
    ) -> httpx.Response:
        """`method` on `/api/v1{path}`; a 429 or 503 is tried again after its Retry-After, `retries`
        times at most; any other 4xx/5xx (or the last 429/503) raises SmartuneError. `content` gives a
        streamed body afresh for each try (an upload)."""
        import httpx

        for attempt in range(self.retries + 1):
            try:
                response = self.client.request(
                    method,
                    API_PREFIX + path,
                    params=params,
                    json=json,
                    content=content() if content is not None else None,
                    headers={**self._auth, **(headers or {})},
                )
            except httpx.TransportError as err:
                raise ServerUnreachable(
                    f"cannot reach the server at {self.base_url} ({err}); is `smartune serve` running?"
                ) from None
            if response.status_code in RETRIED and attempt < self.retries:
                time.sleep(retry_after(response, self.max_retry_wait_s))
                continue
            if response.status_code >= 400:
                raise SmartuneError.from_response(response)
            return response
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def close(self) -> None:
        if self._owned:
            self.client.close()
