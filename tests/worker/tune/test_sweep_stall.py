"""A hung trial in a real sweep: its Ray actor process is frozen (SIGSTOP) from outside, so it neither
reports nor dies, which Tune alone would wait on forever. The stall guard (worker.tune.stall_guard) kills
it past `limits.stall_timeout_s`; it fails with class `stalled` and a one-line reason while the other trial
completes and the sweep ends."""

from __future__ import annotations

import os
import signal
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


def _freeze(_run: Run, pid: int) -> dict[str, Any]:
    os.kill(pid, signal.SIGSTOP)
    return {"frozen": pid}


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
    watcher = TrialWatcher(sweep_settings, "stall-1", {"learning_rate": AIMED}, _freeze)
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
