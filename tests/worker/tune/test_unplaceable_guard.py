"""The unplaceable guard's decision (a fake clock, stand-in trials and node lists); a real sweep on a real
Ray cluster that cannot hold its trial is in test_sweep_unplaceable.py."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

import pytest
from ray.tune.experiment import Trial

from worker.tune.placement import fits
from worker.tune.settings import UNPLACEABLE_TIMEOUT_S, Settings
from worker.tune.unplaceable_guard import (
    CHECK_EVERY_S,
    UnplaceableGuard,
    UnplaceableTrials,
    placeable,
)


@dataclass
class _Factory:
    bundles: list[dict[str, float]]
    strategy: str = "PACK"

    @property
    def required_resources(self) -> dict[str, float]:
        return {k: sum(b.get(k, 0.0) for b in self.bundles) for b in self.bundles for k in b}


@dataclass
class _Trial:
    status: str
    placement_group_factory: _Factory = field(default_factory=lambda: _Factory([{"CPU": 2.0, "GPU": 1.0}]))


class _World:
    """The clock and the live nodes' totals, both set by the test."""

    def __init__(self) -> None:
        self.now = 100.0
        self.nodes: list[dict[str, float]] = [{"CPU": 8.0, "GPU": 1.0}]

    def guard(self, limit_s: float = 60.0) -> UnplaceableGuard:
        return UnplaceableGuard(limit_s, nodes=lambda: self.nodes, clock=lambda: self.now)

    def step(self, guard: UnplaceableGuard, trials: list[Any], seconds: float = CHECK_EVERY_S) -> None:
        self.now += seconds
        guard.on_step_begin(0, trials)


def test_a_node_fits_a_request_only_when_it_has_every_resource_in_total() -> None:
    assert fits({"CPU": 2.0, "GPU": 1.0}, {"CPU": 8.0, "GPU": 1.0, "memory": 1e9})
    assert not fits({"CPU": 2.0, "GPU": 1.0}, {"CPU": 8.0})
    assert not fits({"CPU": 9.0}, {"CPU": 8.0, "GPU": 4.0})
    assert fits({"CPU": 1.0, "GPU": 0.0}, {"CPU": 1.0})  # a zero request needs nothing


def test_bundles_that_may_spread_need_each_a_node_and_packed_ones_one_node_for_all() -> None:
    two_nodes = [{"CPU": 4.0, "GPU": 1.0}, {"CPU": 4.0, "GPU": 1.0}]
    spread = _Trial(Trial.PENDING, _Factory([{"CPU": 1.0, "GPU": 1.0}] * 2, strategy="PACK"))
    packed = _Trial(Trial.PENDING, _Factory([{"CPU": 1.0, "GPU": 1.0}] * 2, strategy="STRICT_PACK"))
    one = _Trial(Trial.PENDING, _Factory([{"CPU": 2.0, "GPU": 2.0}]))
    assert placeable(spread, two_nodes) and not placeable(packed, two_nodes) and not placeable(one, two_nodes)
    assert placeable(one, [{"CPU": 8.0, "GPU": 2.0}])


def test_a_sweep_whose_gpu_node_is_gone_fails_after_the_limit_with_the_reason() -> None:
    world = _World()
    guard, trials = world.guard(limit_s=60.0), [_Trial(Trial.PENDING), _Trial(Trial.TERMINATED)]
    world.step(guard, trials)
    assert guard.since is None  # the node is there: Ray is only slow to place the trial
    world.nodes = [{"CPU": 8.0}]  # the GPU node died; the head is left
    world.step(guard, trials)
    assert guard.since == world.now
    world.step(guard, trials, seconds=55.0)  # under the limit: a restarting node has time to come back
    with pytest.raises(UnplaceableTrials) as raised:
        world.step(guard, trials)
    message = str(raised.value)
    assert "1 pending trial(s) need 2 CPU, 1 GPU on one node" in message
    assert "for 60 s" in message and "at most 8 CPU, 0 GPU on one of 1 live node(s)" in message
    assert "retry the job" in message


def test_a_running_trial_or_a_returning_node_resets_the_wait() -> None:
    world = _World()
    world.nodes = []
    guard = world.guard(limit_s=30.0)
    pending, running = _Trial(Trial.PENDING), _Trial(Trial.RUNNING)
    world.step(guard, [pending, running])
    assert guard.since is None  # a running trial will free what it holds
    world.step(guard, [pending])
    world.step(guard, [pending], seconds=20.0)
    world.nodes = [{"CPU": 4.0, "GPU": 2.0}]  # the node came back
    world.step(guard, [pending])
    assert guard.since is None
    world.nodes = []
    world.step(guard, [pending])
    world.step(guard, [pending], seconds=25.0)  # counted afresh: 25 s < 30 s
    assert guard.since is not None


def test_the_guard_checks_the_nodes_only_every_few_seconds_and_a_restored_sweep_looks_afresh() -> None:
    world, calls = _World(), []
    guard = UnplaceableGuard(10.0, nodes=lambda: calls.append(1) or [], clock=lambda: world.now)
    for _ in range(60):  # 60 Tune steps of 0.1 s
        world.step(guard, [_Trial(Trial.PENDING)], seconds=0.1)
    assert len(calls) == 2  # 5 s apart
    state = pickle.loads(pickle.dumps(UnplaceableGuard(10.0, since=5.0, checked=6.0)))
    assert (state.limit_s, state.since, state.checked) == (10.0, None, float("-inf"))


def test_the_limit_is_a_worker_setting_off_by_default_when_waiting_for_an_autoscaler() -> None:
    assert Settings.from_env({}).unplaceable_timeout_s == UNPLACEABLE_TIMEOUT_S == 900.0
    assert Settings.from_env({"SMARTUNE_UNPLACEABLE_TIMEOUT_S": "30"}).unplaceable_timeout_s == 30.0
    assert Settings.from_env({"SMARTUNE_WAIT_FOR_RESOURCES": "1"}).unplaceable_timeout_s == 0.0
    both = {"SMARTUNE_WAIT_FOR_RESOURCES": "1", "SMARTUNE_UNPLACEABLE_TIMEOUT_S": "3600"}
    assert Settings.from_env(both).unplaceable_timeout_s == 3600.0
    for bad in ("-1", "soon", "nan", "inf"):
        with pytest.raises(ValueError, match="SMARTUNE_UNPLACEABLE_TIMEOUT_S"):
            Settings.from_env({"SMARTUNE_UNPLACEABLE_TIMEOUT_S": bad})
