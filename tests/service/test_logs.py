"""Structured logs (service.http.logs): one JSON object per line, each with the request id the response
carries in `X-Request-ID`, and the job id on lines logged while a route or the engine works on a job."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.config import Settings
from service.engine.rounds import Engine
from service.http import logs
from service.store import crud
from tests.service.fakes import FakeRay
from tests.service.utils import auth, submit


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """What the root logger writes through the JSON handler `smartune serve` installs."""
    out = io.StringIO()
    handler = logs.handler(json=True, stream=out)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield out
    root.removeHandler(handler)
    root.setLevel(level)


def lines(out: io.StringIO) -> list[dict[str, Any]]:
    text = out.getvalue()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]  # one object per line, or it fails here


def test_json_lines_carry_the_request_and_job_ids(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, captured: io.StringIO
) -> None:
    job_id = submit(client, team_key)["id"]
    engine.tick()  # the engine logs the dispatch with the job's id, outside any request
    fake_ray.down = True  # the cancel cannot stop the Ray job: the route logs a warning about this job
    response = client.post(
        f"/api/v1/jobs/{job_id}/cancel", headers={**auth(team_key), "X-Request-ID": "req-42.retry_1"}
    )
    assert response.status_code == 200 and response.headers["x-request-id"] == "req-42.retry_1"

    records = lines(captured)
    for record in records:
        assert {"time", "level", "logger", "message", "request_id", "job_id"} <= set(record), record
    dispatched = next(r for r in records if r["message"].startswith("dispatched"))
    assert dispatched["job_id"] == job_id and dispatched["request_id"] is None
    assert dispatched["level"] == "INFO" and dispatched["logger"] == "service.engine.dispatch"
    warned = next(r for r in records if r["message"].startswith("cancel "))
    assert warned["level"] == "WARNING" and "fake Ray is down" in warned["message"]
    assert warned["request_id"] == response.headers["x-request-id"] and warned["job_id"] == job_id


def test_a_request_id_is_made_when_none_or_an_odd_one_is_sent(client: TestClient, team_key: str) -> None:
    made = client.get("/api/v1/jobs", headers=auth(team_key)).headers["x-request-id"]
    assert logs.sane(made) and len(made) == 32
    for odd in ("two words", "x" * 129, "new\nline", "é"):
        echoed = client.get("/healthz", headers={"X-Request-ID": odd.encode()})
        assert echoed.headers["x-request-id"] not in (odd, made) and logs.sane(echoed.headers["x-request-id"])
    assert client.get("/healthz", headers={"X-Request-ID": "a" * 128}).headers["x-request-id"] == "a" * 128
    assert client.get("/nowhere").headers["x-request-id"]  # every answer, errors too
    assert client.get("/api/v1/jobs").headers["x-request-id"]


def test_the_job_id_of_a_route_is_bound_only_when_sane(
    client: TestClient, team_key: str, captured: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked_up = crud.get_job

    def get_job(**kwargs: Any) -> Any:  # logs from inside the route's work, in the thread pool
        logging.getLogger("tests.probe").info("looking up a job")
        return looked_up(**kwargs)

    monkeypatch.setattr(crud, "get_job", get_job)
    client.get("/api/v1/jobs/job-0123456789ab", headers=auth(team_key))
    client.get("/api/v1/jobs/job%0Aforged", headers=auth(team_key))  # a newline: not put in any log field
    sane, odd = [r for r in lines(captured) if r["logger"] == "tests.probe"]
    assert sane["job_id"] == "job-0123456789ab" and odd["job_id"] is None
    assert sane["request_id"] != odd["request_id"]
    assert logs.JOB_ID.get() is None and logs.REQUEST_ID.get() is None  # nothing leaks out of a request


def test_text_format_shows_the_ids_only_when_set() -> None:
    out = io.StringIO()
    handler = logs.handler(json=False, stream=out)
    logger = logging.getLogger("tests.text")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("plain")
        with logs.bound_job("job-1"):
            logger.warning("about a job")
        token = logs.REQUEST_ID.set("req-1")
        logger.warning("in a request")
        logs.REQUEST_ID.reset(token)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    plain, job, request = out.getvalue().splitlines()
    assert plain.endswith(" WARNING tests.text: plain")
    assert job.endswith(" WARNING tests.text [job_id=job-1]: about a job")
    assert request.endswith(" WARNING tests.text [request_id=req-1]: in a request")


def test_access_lines_get_their_parts_as_fields() -> None:
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", "/healthz", "1.1", 200), None,
    )  # fmt: skip
    token = logs.REQUEST_ID.set("req-7")
    try:
        logs.ContextFilter().filter(record)
    finally:
        logs.REQUEST_ID.reset(token)
    out = json.loads(logs.json_formatter().format(record))
    assert out["request_id"] == "req-7" and out["job_id"] is None
    assert (out["method"], out["path"], out["status"]) == ("GET", "/healthz", 200)
    assert out["message"] == '127.0.0.1:5000 - "GET /healthz HTTP/1.1" 200'


@pytest.mark.parametrize(
    ("env", "given", "json_logs"),
    [("development", None, False), ("production", None, True), ("production", "text", False),
     ("development", "json", True)],
)  # fmt: skip
def test_the_log_format_defaults_to_json_in_production(
    env: str, given: str | None, json_logs: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("service.config.secret_problems", lambda _settings: [])
    assert Settings(env=env, log_format=given).json_logs is json_logs  # type: ignore[arg-type]
