"""The job start-up benchmark's arithmetic (bench/job_startup.py): phases from clock readings, medians.
The benchmark itself runs real Ray jobs (`smartune bench job-startup`); these check what it reports."""

from __future__ import annotations

import pytest

from bench.job_startup import PHASES, medians, phases

RAY = {"submitted": 100.0, "running": 102.0, "final": 140.5, "ray_start": 100.5, "ray_end": 140.0}
RUNS = {"parent_start": 110.0, "first_trial": 125.0, "first_epoch": 127.5, "last_epoch": 128.0,
        "trials_end": 131.0, "parent_end": 139.0, "worker_start_seconds": 6.0}  # fmt: skip


def test_the_phases_follow_one_another_and_add_up_to_the_total() -> None:
    out = phases(RAY, RUNS)
    assert out["submit_to_running"] == 2.0 and out["running_to_parent_run"] == 8.0
    assert out["parent_run_to_first_trial"] == 15.0 and out["first_trial_to_first_epoch"] == 2.5
    assert out["last_epoch_to_trials_end"] == 3.0 and out["trials_end_to_parent_end"] == 8.0
    assert out["parent_end_to_job_end"] == 1.0 and out["total"] == 40.5
    # Every second but the epochs' own (first to last) and Ray's end to our poll is in one phase.
    between = (RUNS["last_epoch"] - RUNS["first_epoch"]) + (RAY["final"] - RAY["ray_end"])
    assert sum(out[p] for p in PHASES if p != "total") + between == pytest.approx(out["total"])
    assert out["worker_start_seconds"] == 6.0 and "driver_import_seconds" not in out  # as logged


def test_medians_take_each_key_over_the_jobs_that_have_it() -> None:
    rows = [phases(RAY, RUNS), phases(RAY | {"final": 150.5}, RUNS), phases(RAY | {"final": 130.5}, RUNS)]
    rows[0]["driver_import_seconds"] = 4.0  # logged by one version only
    out = medians(rows)
    assert out["total"] == 40.5 and out["driver_import_seconds"] == 4.0 and out["submit_to_running"] == 2.0
    assert list(out)[: len(PHASES)] == list(PHASES)
