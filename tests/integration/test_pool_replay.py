"""A tiny replay end to end: a head and 2 worker nodes of 2 logical GPUs, a real `smartune serve` running the
sleeping sweep driver, 4 jobs of two teams submitted over REST, and the simulation of the same jobs."""

from __future__ import annotations

import pytest

from research.pool_replay import workload
from research.pool_replay.__main__ import run

pytestmark = pytest.mark.slow  # about 2.5 minutes on a 2-core machine


def test_a_tiny_replay_runs_every_trial_and_the_simulation_sees_the_same_work() -> None:
    params = workload.Params(
        seed=0, teams=2, jobs=4, load=1.5, pool_gpus=4.0, sleep_min_s=4.0, sleep_max_s=8.0
    )
    result = run(params, nodes=2, gpus_per_node=2, timeout_s=600)
    jobs = result["real"]["jobs"]
    assert [j["state"] for j in jobs] == ["SUCCEEDED"] * 4
    planned = {j["id"]: len(j["durations"]) for j in result["setup"]["jobs"]}
    assert all(len(j["sleeps"]) == planned[j["id"]] for j in jobs)
    for j in jobs:  # submitted <= admitted <= first trial <= finished, on one clock
        assert j["submitted"] <= j["admitted"] <= j["first_start"] <= j["finished"]
    over = result["overheads"]
    assert over["start_delay_s"] > 0 and over["end_delay_s"] > 0 and over["samples"]["jobs"] == 4
    real, sim = result["real"]["summary"], result["sim"]["summary"]
    for team, seconds in real["gpu_seconds_by_team"].items():  # the same sleeps ran on both paths
        assert sim["gpu_seconds_by_team"][team] == pytest.approx(seconds, rel=0.05)
    assert {r["measure"] for r in result["table"]} >= {"wait_admit_s p50", "wait_first_trial_s p95"}
    assert isinstance(result["verdict"]["within"], bool)
