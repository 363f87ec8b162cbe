"""`smartune bench load` at a small size, on both job stores: a crowd of clients against the real service
gets no 5xx, and every job it accepted is persisted and ends (the full-size figures come from `make bench`).
The benchmark starts `smartune serve` itself, given the worker's session Ray head (`--ray-address`, as a user
gives their cluster: a head of the service's own would cost some 15 CPU-s to start and idle here); PostgreSQL
is the harness's throwaway server, given to it by URL as a user would give their own."""

from __future__ import annotations

import sys

import pytest

from bench.load import run_load
from tests.support.cluster import RayHead


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_crowd_gets_no_server_error_and_every_accepted_job_ends(
    store: str, ray_head: RayHead, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # the head's token auth, read by the service it starts
    monkeypatch.setenv("SMARTUNE_ENTRYPOINT_PYTHON", sys.executable)  # as make_server: the drivers' venv
    # One CPU per team: as many jobs at once as the 2-CPU head the benchmark starts by itself would run. On the
    # 4-CPU session head the crowd otherwise had twice as many dispatched, so twice as many accepted (and run).
    monkeypatch.setenv("SMARTUNE_DEFAULT_CPU_QUOTA", "1")
    database_url = (
        request.getfixturevalue("postgres").create_database("load") if store == "postgresql" else None
    )
    report = run_load(
        clients=6,
        teams=2,
        seconds=8,
        queue_limit=1,
        drain_timeout=400,
        database_url=database_url,
        ray_address=ray_head.address,
    )
    assert report["database"] == store
    assert report["server_errors"] == 0, report["first_server_errors"]
    assert report["accepted_jobs"] >= 2 and report["all_final"], report["final_states"]
    assert report["final_states"] == {"SUCCEEDED": report["accepted_jobs"]}, report["first_failures"]
    assert report["endpoints"]["POST /jobs"]["statuses"].get(429, 0) >= 1  # the queue limit answered
