"""`smartune bench api` runs end to end at a small size (the real numbers come from `make bench`)."""

from __future__ import annotations

import pytest

from bench.api_load import api_latency, scheduler_round


def test_scheduler_benchmark_small() -> None:
    report = scheduler_round(jobs=300, teams=7, rounds=2)
    assert report["decision"]["n"] == 2 and report["admitted_per_round"] > 0


@pytest.mark.usefixtures("starts_processes")  # a uvicorn server process (bench/api_server.py)
def test_api_benchmark_small() -> None:
    report = api_latency(clients=4, submits=3, reads=5)
    assert report["post_jobs"]["errors"] == report["get_job"]["errors"] == 0
    assert report["post_jobs"]["n"] == 12 and report["get_job"]["n"] == 20
