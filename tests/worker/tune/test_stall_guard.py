"""The stall guard's decision: which RUNNING trial has gone silent past its limit (a fake clock, stand-in
trials and a recording kill); the real kill in a real sweep is in test_sweep_stall.py."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

import pytest
from ray.tune.experiment import Trial

from worker.tune import stall_guard
from worker.tune.stall_guard import (
    FIRST_REPORT_S,
    STALL_FACTOR,
    STALL_FLOOR_S,
    Pace,
    StallGuard,
    stall_limit,
)
from worker.tune.tracking import TrackingTarget


@dataclass
class _State:
    ray_actor: Any


@dataclass
class _Trial:
    trial_id: str
    status: str = Trial.RUNNING
    temporary_state: _State = field(default_factory=lambda: _State(ray_actor=object()))


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def killed(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    actors: list[Any] = []
    monkeypatch.setattr(stall_guard.ray, "kill", lambda actor, no_restart: actors.append(actor))
    monkeypatch.setattr(stall_guard, "trial_run", lambda *_args: None)  # no MLflow run to tag here
    return actors


def _guard(clock: _Clock, stall_timeout_s: float | None) -> StallGuard:
    return StallGuard(TrackingTarget("sqlite:///unused.db", "0", "job-1"), stall_timeout_s, clock=clock)


def test_without_a_set_limit_a_trial_has_hours_for_its_first_report_then_ten_times_its_longest_gap() -> None:
    pace = Pace(last=0.0)
    assert stall_limit(pace, None) == FIRST_REPORT_S == 6 * 3600  # a first epoch may take long
    pace.report(100.0)
    assert stall_limit(pace, None) == STALL_FLOOR_S  # 10 x 100 s is under the floor
    pace.report(400.0)  # a gap of 300 s
    assert stall_limit(pace, None) == STALL_FACTOR * 300.0
    assert stall_limit(pace, 60.0) == 60.0  # a set limit wins, from the start on


def test_the_silent_running_trial_is_killed_once_and_the_others_are_left_alone(killed: list[Any]) -> None:
    clock = _Clock()
    guard = _guard(clock, stall_timeout_s=60.0)
    silent, reporting, pending = _Trial("a"), _Trial("b"), _Trial("c", status=Trial.PENDING)
    trials: list[Any] = [silent, reporting, pending]
    for trial in trials:
        guard.on_trial_start(0, trials, trial)
    for _ in range(4):
        clock.now += 20.0
        guard.on_trial_result(0, trials, reporting, {})
        guard.on_step_begin(0, trials)
    assert killed == [silent.temporary_state.ray_actor]  # 80 s silent > 60 s; c is not running
    clock.now += 100.0
    guard.on_step_begin(0, trials)
    assert len(killed) == 2 and killed[1] is reporting.temporary_state.ray_actor  # silent 100 s now
    guard.on_step_begin(0, trials)
    assert len(killed) == 2  # one kill per start: Tune reports the death and restarts or ends the trial
    guard.on_trial_start(0, trials, silent)  # retried from its checkpoint: measured afresh
    clock.now += 59.0
    guard.on_step_begin(0, trials)
    assert len(killed) == 2


def test_a_restored_sweep_measures_afresh(killed: list[Any]) -> None:
    clock = _Clock()
    guard = _guard(clock, stall_timeout_s=None)
    trial: Any = _Trial("a")
    guard.on_trial_start(0, [trial], trial)
    guard.on_trial_result(0, [trial], trial, {})
    restored = pickle.loads(pickle.dumps(guard))
    assert restored.paces == {} and restored.stall_timeout_s is None and restored.target == guard.target
    clock.now += 10 * STALL_FLOOR_S
    restored.on_step_begin(0, [trial])  # the old process's times are not carried over: no kill
    assert killed == []
