"""`smartune bench load` at a small size, on both job stores: a crowd of clients against the real service
gets no 5xx, and every job it accepted is persisted and ends (the full-size figures come from `make bench`).
The benchmark starts `smartune serve` itself; PostgreSQL is the harness's throwaway server, given to it by
URL as a user would give their own."""

from __future__ import annotations

import pytest

from bench.load import run_load


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_crowd_gets_no_server_error_and_every_accepted_job_ends(
    store: str, request: pytest.FixtureRequest
) -> None:
    database_url = (
        request.getfixturevalue("postgres").create_database("load") if store == "postgresql" else None
    )
    report = run_load(
        clients=6, teams=2, seconds=8, queue_limit=1, drain_timeout=400, database_url=database_url
    )
    assert report["database"] == store
    assert report["server_errors"] == 0, report["first_server_errors"]
    assert report["accepted_jobs"] >= 2 and report["all_final"], report["final_states"]
    assert report["final_states"] == {"SUCCEEDED": report["accepted_jobs"]}, report["first_failures"]
    assert report["endpoints"]["POST /jobs"]["statuses"].get(429, 0) >= 1  # the queue limit answered
