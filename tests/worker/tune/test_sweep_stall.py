"""A hung trial in a real sweep: its Ray actor process is frozen (SIGSTOP) from outside, so it neither
reports nor dies, which Tune alone would wait on forever. The stall guard (worker.tune.stall_guard) kills
it past `limits.stall_timeout_s`; it fails with class `stalled` and a one-line reason while the other trial
completes and the sweep ends."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mlflow.entities import Run

from tests.support.cluster import wait_for
from tests.worker.tune.faults import TrialWatcher
from tests.worker.tune.test_sweep_fault_classes import (
    AIMED,
    _by_lr,
    _check_failed_and_spared,
    _sweep_with,
    _two_trials,
)
from worker.tune.settings import Settings

pytestmark = [pytest.mark.glue, pytest.mark.slow]

STALL_S = 60.0  # the tiny trials report every few seconds (tens under load); the frozen one never again


def _store_inodes(settings: Settings) -> set[str]:
    """`MAJOR:MINOR:INODE` (as /proc/locks writes them) of the SQLite tracking store's files."""
    db = Path(settings.tracking_uri.removeprefix("sqlite:///"))
    found = set()
    for path in (db, *(db.with_name(db.name + suffix) for suffix in ("-journal", "-wal", "-shm"))):
        if path.exists():
            stat = path.stat()
            found.add(f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}")
    return found


def _holds_lock(pid: int, inodes: set[str]) -> bool:
    """Whether `pid` holds a POSIX lock (SQLite's) on one of `inodes`: /proc/locks lines read
    `N: POSIX ADVISORY WRITE PID MAJ:MIN:INODE START END`."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "->" not in fields and len(fields) >= 6 and fields[4] == str(pid) and fields[5] in inodes:
            return True
    return False


def _freezer(settings: Settings) -> Callable[[Run, int], dict[str, Any]]:
    """SIGSTOP for the trial, at a moment it holds no lock on the SQLite tracking store: frozen inside a
    write it would lock every other trial out of the store until the guard kills it (past the store's
    retries), which is this test's store and not what it checks. With an MLflow server, as the team stack
    runs, a client holds no lock; `make run`'s embedded SQLite store keeps that risk."""
    inodes = _store_inodes(settings)

    def freeze(_run: Run, pid: int) -> dict[str, Any]:
        for _ in range(200):
            os.kill(pid, signal.SIGSTOP)
            if not _holds_lock(pid, inodes):
                return {"frozen": pid}
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.01)
        raise AssertionError(f"process {pid} held the tracking store's lock at each of 200 tries")

    return freeze


def _ended(pid: int) -> bool:
    """Whether the process is gone, or dead (a zombie its parent, the raylet, has not reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def _ends(pid: int, within_s: float) -> bool:
    try:
        wait_for(lambda: _ended(pid), within_s, f"the end of process {pid}", interval=0.2)
    except TimeoutError:
        return False
    return True


def test_a_frozen_trial_is_killed_as_stalled_while_the_other_finishes(
    ray_cluster: Any, sweep_settings: Settings, tiny_spec: Any
) -> None:
    spec = _two_trials(tiny_spec, stall_timeout_s=STALL_S, epochs=2, max_train_samples=64)
    watcher = TrialWatcher(sweep_settings, "stall-1", {"learning_rate": AIMED}, _freezer(sweep_settings))
    try:
        summary = _sweep_with(watcher, spec, "stall-1", sweep_settings)
    finally:
        pid = watcher.done.get("frozen")
        ended = pid is None or _ends(pid, within_s=30)  # Ray's raylet SIGKILLs it, then reaps it
        if not ended:  # the guard did not end it: leave no frozen process behind
            os.kill(pid, signal.SIGKILL)
    assert ended, "the frozen trial's process outlived the sweep"
    failed, spared = _by_lr(sweep_settings, "stall-1")
    message = _check_failed_and_spared(summary, failed, spared, "stalled")
    silent_s = float(message.removeprefix("StalledTrial: no report for ").split(" s ")[0])
    assert STALL_S <= silent_s < STALL_S + 10, message  # killed soon after the limit, not much later
    assert f"(stall limit {STALL_S:.0f} s); the driver killed its process" in message
    print(f"stalled: {message}")
