"""`GET /metrics` (service.http.metrics, service.api.routes.metrics): who may read it, what it says about
HTTP traffic (by route template, bounded labels) and about the pool (read from the job store at scrape
time), one registry per app, and a scrape that survives an unreadable store."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from service.config import Settings
from service.engine.rounds import Engine
from service.http import metrics as http_metrics
from service.main import create_app
from service.store.db import Database
from tests.service.fakes import FakeRay, FakeTracker
from tests.service.utils import auth, make_team, spec, submit

TOKEN = "metrics-token-0123456789abcdef"
GPU_JOB = spec(resources={"gpus": 1, "cpus": 1})


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"metrics_token": TOKEN})


def scrape(client: TestClient, key: str = TOKEN) -> dict[str, Any]:
    response = client.get("/metrics", headers=auth(key))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {family.name: family for family in text_string_to_metric_families(response.text)}


def samples(family: Any, name: str | None = None) -> dict[tuple[tuple[str, str], ...], float]:
    """A family's samples (of one sample name, default: the family's own) by their sorted labels."""
    wanted = name or family.name
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples if s.name == wanted}


def value(families: dict[str, Any], name: str, **labels: str) -> float:
    return samples(families[name])[tuple(sorted(labels.items()))]


def errors(families: dict[str, Any]) -> float:
    """The scrape-error counter (the parser names the family without `_total`, its sample with it)."""
    return samples(families["smartune_metrics_scrape_errors"], "smartune_metrics_scrape_errors_total")[()]


def test_the_pool_and_http_traffic_after_two_teams_submit(
    client: TestClient, db: Database, engine: Engine, fake_ray: FakeRay
) -> None:
    nlp, vision = make_team(db, "nlp"), make_team(db, "vision", gpu_quota=2)  # nlp: the default 1 GPU
    nlp_jobs = [submit(client, nlp, GPU_JOB)["id"] for _ in range(2)]
    vision_jobs = [submit(client, vision, GPU_JOB)["id"] for _ in range(2)]
    engine.tick()  # the pool has 2 GPUs: one job of each team runs, the others wait
    for job_id in nlp_jobs:
        assert client.get(f"/api/v1/jobs/{job_id}", headers=auth(nlp)).status_code == 200
    assert client.get(f"/api/v1/jobs/{vision_jobs[0]}", headers=auth(nlp)).status_code == 404

    families = scrape(client)
    assert value(families, "smartune_up") == 1.0
    assert value(families, "smartune_queue_depth") == 2.0
    assert value(families, "smartune_jobs", state="QUEUED") == 2.0
    assert value(families, "smartune_jobs", state="DISPATCHED") == 2.0
    assert value(families, "smartune_jobs", state="SUCCEEDED") == 0.0  # every state, zeros included
    assert value(families, "smartune_team_jobs", team="nlp", state="QUEUED") == 1.0
    assert value(families, "smartune_team_gpus_reserved", team="nlp") == 1.0
    assert value(families, "smartune_team_gpus_reserved", team="vision") == 1.0
    assert value(families, "smartune_team_cpus_reserved", team="vision") == 1.0
    assert value(families, "smartune_pool_gpus") == fake_ray.gpus
    assert value(families, "smartune_pool_cpus") == fake_ray.cpus
    assert value(families, "smartune_engine_leader") == 1.0
    pool = client.get("/api/v1/pool", headers=auth(nlp)).json()  # what the scheduler counts, per the API
    assert pool["teams"][0]["gpus_in_use"] == value(families, "smartune_team_gpus_reserved", team="nlp")

    latency = samples(families["http_request_duration_seconds"], "http_request_duration_seconds_count")
    assert latency[(("handler", "/api/v1/jobs/{job_id}"), ("method", "GET"))] == 3.0
    assert latency[(("handler", "/api/v1/jobs"), ("method", "POST"))] == 4.0
    requests = samples(families["http_requests"], "http_requests_total")
    assert requests[(("handler", "/api/v1/jobs/{job_id}"), ("method", "GET"), ("status", "200"))] == 2.0
    assert requests[(("handler", "/api/v1/jobs/{job_id}"), ("method", "GET"), ("status", "404"))] == 1.0
    assert requests[(("handler", "/api/v1/jobs"), ("method", "POST"), ("status", "201"))] == 4.0
    every_label = {v for family in families.values() for s in family.samples for v in s.labels.values()}
    assert not any(job_id in label for job_id in nlp_jobs + vision_jobs for label in every_label)


def test_labels_stay_bounded_whatever_the_path_or_method(client: TestClient, team_key: str) -> None:
    client.get("/api/v1/jobs/job-123abc/", headers=auth(team_key), follow_redirects=False)  # a redirect
    client.get("/api/v1/jobs/job-123abc/nested/deeper", headers=auth(team_key))
    client.get("/nowhere/job-123abc")
    client.request("BREW", "/healthz")
    client.get("/api/v1/jobs/", headers=auth(team_key), follow_redirects=False)
    client.get("/healthz")
    requests = samples(scrape(client)["http_requests"], "http_requests_total")
    labels = {dict(key)["handler"] for key in requests}
    assert not any("job-123abc" in label for label in labels), labels
    assert {dict(key)["method"] for key in requests} <= {"GET", "OTHER"}
    assert requests[(("handler", "none"), ("method", "GET"), ("status", "307"))] >= 1.0
    assert requests[(("handler", "/healthz"), ("method", "OTHER"), ("status", "405"))] == 1.0
    assert requests[(("handler", "/healthz"), ("method", "GET"), ("status", "200"))] == 1.0


@pytest.mark.parametrize(
    ("key", "status"),
    [(None, 401), ("smt_nope_nope", 401), ("not-the-token-but-long-enough", 401), ("team", 403)],
)
def test_metrics_need_an_admin_key_or_the_token(
    client: TestClient, team_key: str, key: str | None, status: int
) -> None:
    headers = {} if key is None else auth(team_key if key == "team" else key)
    response = client.get("/metrics", headers=headers)
    assert response.status_code == status, response.text
    if status == 401:
        assert response.headers["www-authenticate"] == "Bearer"
    assert "smartune_up" not in response.text


def test_metrics_are_read_with_the_token_or_an_admin_key_and_not_rate_limited(
    client: TestClient, admin_key: str
) -> None:
    limiter = client.app.state.rate_limiter  # type: ignore[attr-defined]
    for _ in range(limiter.burst + 5):  # past any key's burst: scrapes are never answered 429
        assert client.get("/metrics", headers=auth(TOKEN)).status_code == 200
    assert "smartune_up" in scrape(client, admin_key)


def test_metrics_stay_out_of_the_openapi_document(client: TestClient) -> None:
    assert "/metrics" not in client.get("/openapi.json").json()["paths"]


def test_without_a_token_only_admin_keys_read_the_metrics(
    settings: Settings, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:
    app = create_app(
        settings.model_copy(update={"metrics_token": None}),
        ray=fake_ray,
        tracker=fake_tracker,
        run_engine=False,
    )
    with TestClient(app) as client:
        assert client.get("/metrics", headers=auth(TOKEN)).status_code == 401


def test_an_unreadable_store_is_reported_not_a_500(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("the store is gone")

    monkeypatch.setattr(http_metrics, "read_snapshot", broken)
    families = scrape(client)
    assert value(families, "smartune_up") == 0.0
    assert errors(families) == 1.0
    assert "smartune_jobs" not in families
    assert errors(scrape(client)) == 2.0
    monkeypatch.undo()
    assert value(scrape(client), "smartune_up") == 1.0


def test_each_app_has_its_own_registry(
    settings: Settings, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:
    apps = [create_app(settings, ray=fake_ray, tracker=fake_tracker, run_engine=False) for _ in range(2)]
    with TestClient(apps[0]) as first, TestClient(apps[1]) as second:
        for _ in range(3):
            first.get("/healthz")
        ours = samples(scrape(first)["http_requests"], "http_requests_total")
        theirs = samples(scrape(second)["http_requests"], "http_requests_total")
    assert ours[(("handler", "/healthz"), ("method", "GET"), ("status", "200"))] == 3.0
    assert (("handler", "/healthz"), ("method", "GET"), ("status", "200")) not in theirs
    assert REGISTRY.get_sample_value("smartune_up") is None  # nothing in the process-wide registry
    assert apps[0].state.metrics.registry is not apps[1].state.metrics.registry


GOOD = {
    "env": "production",
    "database_url": "postgresql+psycopg2://smartune:s3cr3t-Value@postgres:5432/smartune",
    "ray_address": "http://ray-head:8265",
    "ray_auth_token": "a-real-token-0123456789",
}


@pytest.mark.parametrize("token", ["changethis", "", "  ", "short-token"])
def test_production_refuses_a_default_empty_or_short_metrics_token(
    token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    with pytest.raises(ValidationError, match="SMARTUNE_METRICS_TOKEN") as caught:
        Settings(**GOOD, metrics_token=token)
    assert token.strip() == "" or token not in str(caught.value).split("input_value")[0]


def test_production_accepts_a_long_metrics_token_or_none() -> None:
    assert Settings(**GOOD, metrics_token=TOKEN).metrics_token == TOKEN
    assert Settings(**GOOD).metrics_token is None
    assert TOKEN not in repr(Settings(**GOOD, metrics_token=TOKEN))
    assert Settings(**(GOOD | {"env": "development"}), metrics_token="x").metrics_token == "x"
