"""Rate limits (service.http.ratelimit): a token bucket per API key, per client address for requests
without a valid key, 429 with `Retry-After`, and never on the health probes.

The tests swap the app's limiter for one with a fake clock: a bucket refills only when the test says so."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from service.http.ratelimit import RateLimiter, retry_after
from tests.service.utils import auth, spec

BURST = 3


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(client: TestClient) -> Clock:
    """Install a limiter of 0.5 requests per second, bursts of 3, on a clock that stands still."""
    fake = Clock()
    client.app.state.rate_limiter = RateLimiter(0.5, BURST, clock=fake)  # type: ignore[attr-defined]
    return fake


def _spend(client: TestClient, headers: dict[str, str], n: int = BURST, path: str = "/api/v1/jobs") -> None:
    for _ in range(n):
        assert client.get(path, headers=headers).status_code != 429


def test_a_key_past_its_burst_gets_429_with_retry_after(
    client: TestClient, clock: Clock, team_key: str
) -> None:
    _spend(client, auth(team_key))
    refused = client.get("/api/v1/jobs", headers=auth(team_key))
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "2"  # one token at 0.5 per second
    body = refused.json()
    assert set(body) == {"detail", "field"} and body["field"] is None
    assert "rate limit" in body["detail"] and "per API key" in body["detail"]
    clock.now += 1.0  # half a token: still refused, and told to wait the rest
    again = client.get("/api/v1/jobs", headers=auth(team_key))
    assert again.status_code == 429 and again.headers["retry-after"] == "1"
    clock.now += 1.0
    assert client.get("/api/v1/jobs", headers=auth(team_key)).status_code == 200


def test_every_route_behind_a_key_is_limited_before_its_work(
    client: TestClient, clock: Clock, team_key: str, admin_key: str
) -> None:
    _spend(client, auth(team_key))
    for method, path in [
        ("POST", "/api/v1/jobs"),
        ("GET", "/api/v1/jobs/job-x"),
        ("GET", "/api/v1/pool"),
        ("GET", "/api/v1/pool/queue"),
        ("GET", "/api/v1/keys/me"),
    ]:
        response = client.request(method, path, headers=auth(team_key), json=spec())
        assert response.status_code == 429, (method, path)
        assert response.headers["retry-after"]
    assert client.get("/api/v1/jobs", headers=auth(team_key)).status_code == 429
    _spend(client, auth(admin_key), path="/api/v1/teams")
    assert client.get("/api/v1/teams", headers=auth(admin_key)).status_code == 429


def test_limits_are_per_key(client: TestClient, clock: Clock, team_key: str, other_key: str) -> None:
    _spend(client, auth(team_key))
    assert client.get("/api/v1/jobs", headers=auth(team_key)).status_code == 429
    _spend(client, auth(other_key))  # another team's key has its own bucket
    assert client.get("/api/v1/jobs", headers=auth(other_key)).status_code == 429


def test_requests_without_a_valid_key_are_limited_per_client_address(
    client: TestClient, clock: Clock, team_key: str
) -> None:
    for headers in [{}, auth("nonsense"), auth(team_key + "x")]:  # missing, malformed, wrong secret
        assert client.get("/api/v1/jobs", headers=headers).status_code == 401
    refused = client.get("/api/v1/jobs", headers=auth("smt_000000000000_" + "x" * 43))
    assert refused.status_code == 429 and refused.headers["retry-after"] == "2"
    assert "without a valid key" in refused.json()["detail"]
    assert client.get("/api/v1/jobs").status_code == 429
    # the valid key from the same address has a bucket of its own
    assert client.get("/api/v1/jobs", headers=auth(team_key)).status_code == 200
    # another address is not limited by this one's guesses
    elsewhere = TestClient(client.app, client=("192.0.2.7", 40000))
    assert elsewhere.get("/api/v1/jobs").status_code == 401


def test_health_probes_are_never_limited(client: TestClient, clock: Clock, admin_key: str) -> None:
    _spend(client, {}, path="/api/v1/pool")
    assert client.get("/api/v1/pool").status_code == 429
    for _ in range(3 * BURST):
        assert client.get("/healthz").status_code == 200
    _spend(client, auth(admin_key))
    for _ in range(3 * BURST):
        assert client.get("/readyz").status_code == 200  # a probe carries no key: never limited
    assert client.get("/api/v1/jobs", headers=auth(admin_key)).status_code == 429


def test_cors_exposes_retry_after_to_browsers() -> None:
    from service.http.headers import cors_options

    assert "Retry-After" in cors_options(["https://ui.example"])["expose_headers"]  # type: ignore[operator]


def test_the_bucket_refills_at_the_rate_up_to_the_burst() -> None:
    clock = Clock()
    limiter = RateLimiter(2.0, 4, clock=clock)
    assert [limiter.acquire("k") for _ in range(4)] == [0.0] * 4
    assert limiter.acquire("k") == pytest.approx(0.5)
    clock.now += 100  # a long pause refills the burst, no more
    assert [limiter.acquire("k") for _ in range(5)].count(0.0) == 4


def test_the_buckets_memory_is_bounded() -> None:
    clock = Clock()
    limiter = RateLimiter(1.0, 2, max_buckets=3, clock=clock)
    limiter.acquire("addr:a")
    limiter.acquire("addr:b")
    clock.now += 5  # a and b have refilled: forgetting them changes nothing
    limiter.acquire("addr:c")
    limiter.acquire("addr:d")  # full: the refilled buckets go, the busy one stays
    assert set(limiter._buckets) == {"addr:c", "addr:d"}
    for n in range(30):  # a flood of fresh addresses never grows past the bound
        limiter.acquire(f"flood:{n}")
        assert len(limiter._buckets) <= 3


def test_retry_after_is_whole_seconds_and_at_least_one() -> None:
    assert [retry_after(w) for w in (0.0, 0.01, 1.0, 1.2, 59.9)] == ["1", "1", "1", "2", "60"]
    with pytest.raises(ValueError):
        RateLimiter(0, 1)
