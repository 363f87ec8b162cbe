"""A small client of the real server for the integration tests: a job spec, calls that assert their status,
and waiting for a job's state."""

from __future__ import annotations

import copy
import time
from typing import Any

import httpx

from tests.service.utils import QUICK_SPEC
from tests.support.cluster import Server

FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


# A one-cell grid, for a test about the job rather than its trials: the second trial of `tiny_spec` costs
# about 3 CPU-s (its training, evaluation, MLflow runs and the model logged as a pipeline).
ONE_TRIAL: dict[str, Any] = {"axes": {"learning_rate": {"type": "grid", "values": [1e-4]}}}


def tiny_spec(**changes: Any) -> dict[str, Any]:
    """The service tests' quick spec, trained with SMART: two trials, one at a time (Tune reuses the one
    worker process; a test about concurrent trials says so in its limits)."""
    spec = copy.deepcopy(QUICK_SPEC) | {
        "name": "integration",
        "method": "smart",
        "limits": {"max_concurrent_trials": 1},
    }
    return spec | changes


class Api:
    def __init__(self, server: Server, key: str) -> None:
        self.http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)

    def __call__(self, method: str, path: str, expect: int | None = 200, **kw: Any) -> Any:
        response = self.http.request(method, path, **kw)
        if expect is not None:
            assert response.status_code == expect, f"{method} {path}: {response.status_code} {response.text}"
        return response

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(self("GET", f"/api/v1/jobs/{job_id}").json())

    def submit(self, spec: dict[str, Any], timeout: float = 60) -> str:
        """Submit; a 503 (the pool not read from Ray yet, the database busy) is tried again after its
        Retry-After, as the SDK does."""
        deadline = time.monotonic() + timeout
        response = self("POST", "/api/v1/jobs", expect=None, json=spec)
        while response.status_code == 503 and time.monotonic() < deadline:
            time.sleep(float(response.headers.get("Retry-After", "1")))
            response = self("POST", "/api/v1/jobs", expect=None, json=spec)
        assert response.status_code == 201, f"POST /api/v1/jobs: {response.status_code} {response.text}"
        return str(response.json()["id"])

    def wait(
        self, job_id: str, until: Any, timeout: float = 240, *, past_the_end: bool = False
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if until(job):
                return job
            assert past_the_end or job["state"] not in FINAL, (
                f"{job_id} ended {job['state']}: {job['message']}"
            )
            assert time.monotonic() < deadline, f"{job_id} still {job['state']} after {timeout}s"
            time.sleep(1)

    def team_key(self, name: str, **quota: Any) -> str:
        self("POST", "/api/v1/teams", expect=201, json={"name": name, **quota})
        return str(self("POST", f"/api/v1/teams/{name}/keys", expect=201, json={}).json()["key"])
