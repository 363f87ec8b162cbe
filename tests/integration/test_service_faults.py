"""The control plane's own faults, for real: the service SIGKILLed while it dispatches, and its PostgreSQL
stopped under it. Each runs a real server on a real Ray head and waits for real tiny jobs to finish."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.engine.ray_jobs import auth_headers
from tests.integration.client import FINAL, ONE_TRIAL, Api, tiny_spec
from tests.support.cluster import RayHead, Server, make_server, start_postgres

pytestmark = pytest.mark.slow


def ray_submissions(head: RayHead, job_id: str) -> list[str]:
    """The submission ids Ray holds for `job_id`, from its Jobs REST API."""
    jobs = httpx.get(f"{head.address}/api/jobs/", headers=auth_headers(), timeout=10).json()
    return sorted(j["submission_id"] for j in jobs if (j.get("submission_id") or "").startswith(job_id))


def poll(api: Api, job_id: str, until: Any, timeout: float = 60) -> dict[str, Any]:
    """Like Api.wait, but every 50 ms: the moment to catch is short."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = api.job(job_id)
        if until(job):
            return job
        time.sleep(0.05)
    raise AssertionError(f"{job_id}: the awaited moment never came")


def test_the_service_killed_while_dispatching_runs_each_attempt_exactly_once(
    server: Server, ray_head: RayHead
) -> None:
    admin = Api(server, server.admin_key())
    key = admin.team_key("nlp")
    api = Api(server, key)
    first = api.submit(tiny_spec(name="killed as its attempt is recorded", search_space=ONE_TRIAL))
    poll(api, first, lambda j: bool(j["attempts"]))  # recorded; Ray may or may not have it yet
    server.stop(signal.SIGKILL)
    server.start()
    api = Api(server, key)
    second = api.submit(tiny_spec(name="killed just after it was queued", seeds=[2], search_space=ONE_TRIAL))
    time.sleep(0.3)  # the scheduler runs every 0.5 s: this lands anywhere in its round
    server.stop(signal.SIGKILL)
    server.start()
    api = Api(server, key)
    for job_id in (first, second):
        job = api.wait(job_id, lambda j: j["state"] in FINAL, timeout=420)
        assert job["state"] == "SUCCEEDED", job["message"]
        attempts = sorted(a["submission_id"] for a in job["attempts"])
        assert attempts == [f"{job_id}-a1"]  # no second attempt for a job that was only interrupted
        assert ray_submissions(ray_head, job_id) == attempts  # and Ray ran exactly that one
        changes = [t["to_state"] for t in job["transitions"] if t["from_state"] != t["to_state"]]
        assert changes.count("SUCCEEDED") == 1  # not counting the timeline's notes (checkpoint retention)


def test_postgresql_stopped_under_a_running_service_gives_503_and_loses_nothing(
    tmp_path: Path, ray_head: RayHead, glue_dir: Path
) -> None:
    postgres = start_postgres()
    server = make_server(
        tmp_path,
        ray_address=ray_head.address,
        database_url=postgres.create_database("outage"),
        SMARTUNE_DB_TIMEOUT_S="2",
    )
    try:
        server.start()
        admin = Api(server, server.admin_key())
        api = Api(server, admin.team_key("nlp"))
        accepted = api.submit(tiny_spec(name="accepted before the outage", search_space=ONE_TRIAL))
        api.wait(accepted, lambda j: j["state"] in ("DISPATCHED", "RUNNING"))
        postgres.halt()
        for method, path, body in [
            ("GET", f"/api/v1/jobs/{accepted}", None),
            ("GET", "/api/v1/jobs", None),
            ("POST", "/api/v1/jobs", tiny_spec(name="sent during the outage")),
        ]:
            answer = api(method, path, expect=None, json=body)
            assert answer.status_code == 503, f"{method} {path}: {answer.status_code} {answer.text}"
            assert int(answer.headers["Retry-After"]) >= 1 and "database" in answer.json()["detail"]
        assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
        assert api("GET", "/readyz", expect=None).status_code == 503  # readiness says the store is down
        time.sleep(3)  # engine rounds fail meanwhile; the process must stay up
        assert server.process is not None and server.process.poll() is None
        postgres.resume()
        job = api.wait(accepted, lambda j: j["state"] in FINAL, timeout=420)
        assert job["state"] == "SUCCEEDED", job["message"]
        assert [a["submission_id"] for a in job["attempts"]] == [f"{accepted}-a1"]
        after = api.submit(tiny_spec(name="after the outage", seeds=[3]))
        assert api.job(after)["state"] in ("QUEUED", "DISPATCHED")
        admin("POST", f"/api/v1/jobs/{after}/cancel")
    finally:
        server.stop()
        postgres.stop()
