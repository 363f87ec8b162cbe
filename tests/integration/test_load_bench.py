"""`smartune bench load` at a small size, on both job stores: a crowd of clients against the real service
gets no 5xx, and every job it accepted is persisted and ends (the full-size figures come from `make bench`)."""

from __future__ import annotations

import pytest

from bench.load import run_load


@pytest.mark.slow
@pytest.mark.parametrize("postgres", [False, True], ids=["sqlite", "postgresql"])
def test_a_crowd_gets_no_server_error_and_every_accepted_job_ends(postgres: bool) -> None:
    report = run_load(clients=6, teams=2, seconds=8, queue_limit=1, drain_timeout=400, postgres=postgres)
    assert report["server_errors"] == 0, report["first_server_errors"]
    assert report["accepted_jobs"] >= 2 and report["all_final"], report["final_states"]
    assert report["final_states"] == {"SUCCEEDED": report["accepted_jobs"]}
    assert report["endpoints"]["POST /jobs"]["statuses"].get(429, 0) >= 1  # the queue limit answered
