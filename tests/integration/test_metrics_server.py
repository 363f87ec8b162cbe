"""Operations on a real `smartune serve`: Prometheus scrapes /metrics over HTTP with an admin key, and with
`SMARTUNE_LOG_FORMAT=json` the server's log holds JSON lines (uvicorn's own included) carrying the request
id the response echoed. The pool metrics' main test reruns on PostgreSQL (its statement timeout)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.client import Api
from tests.service.test_metrics import (  # noqa: F401 (the fixture and the test, rerun on PostgreSQL)
    settings,
    test_the_pool_and_http_traffic_after_two_teams_submit,
)
from tests.support.cluster import Postgres, RayHead, Server, make_server


@pytest.fixture
def db_url(postgres: Postgres) -> str:
    return postgres.create_database(f"t_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def json_server(tmp_path: Path, ray_head: RayHead) -> Iterator[Server]:
    server = make_server(tmp_path, ray_address=ray_head.address, SMARTUNE_LOG_FORMAT="json").start()
    yield server
    server.stop()


def scrape(api: Api) -> dict[str, Any]:
    response = api("GET", "/metrics")
    return {family.name: family for family in text_string_to_metric_families(response.text)}


def gauge(families: dict[str, Any], name: str) -> float | None:
    family = families.get(name)
    return family.samples[0].value if family is not None else None


def test_prometheus_scrapes_and_the_log_is_json_lines(json_server: Server) -> None:
    admin = Api(json_server, json_server.admin_key())
    team = Api(json_server, admin.team_key("nlp"))
    missing = team("GET", "/api/v1/jobs/job-000000000000", expect=404, headers={"X-Request-ID": "it-req-1"})
    assert missing.headers["x-request-id"] == "it-req-1"

    deadline = time.monotonic() + 60
    while (families := scrape(admin)) and not gauge(families, "smartune_pool_cpus"):
        assert time.monotonic() < deadline, "the engine never read the pool's capacity"
        time.sleep(0.5)  # the engine's first round (and a fresh head's node list) take a moment
    assert gauge(families, "smartune_up") == 1.0
    assert (gauge(families, "smartune_pool_cpus"), gauge(families, "smartune_pool_gpus")) == (4.0, 2.0)
    assert gauge(families, "smartune_queue_depth") == 0.0
    counted = {
        (s.labels["handler"], s.labels["status"]): s.value
        for s in families["http_requests"].samples
        if s.name == "http_requests_total"
    }
    assert counted[("/api/v1/jobs/{job_id}", "404")] == 1.0
    assert not any("job-000000000000" in handler for handler, _ in counted)
    assert httpx.get(f"{json_server.url}/metrics", timeout=10).status_code == 401

    records = [json.loads(line) for line in json_server.output().splitlines() if line.startswith("{")]
    assert all({"time", "level", "logger", "message", "request_id", "job_id"} <= set(r) for r in records)
    assert any(r["logger"].startswith("uvicorn") and "Uvicorn running" in r["message"] for r in records)
    access = [r for r in records if r["logger"] == "uvicorn.access" and r["request_id"] == "it-req-1"]
    assert len(access) == 1 and access[0]["status"] == 404
    assert access[0]["path"] == "/api/v1/jobs/job-000000000000" and access[0]["method"] == "GET"
