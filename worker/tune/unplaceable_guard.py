"""Driver-side Tune callback that ends a sweep whose trials no live Ray node can hold any more.

Tune waits for resources as if an autoscaler would bring them: a sweep whose GPU node died for good (its
running trial died with it and went back to PENDING) stays RUNNING forever, holding its team's place in
the pool, and the stall guard cannot help since nothing runs. Every `CHECK_EVERY_S` this guard looks at
the sweep: no trial RUNNING, at least one PENDING, and no live node whose total resources fit any pending
trial's request. Once that has held for `limit_s` it raises `UnplaceableTrials`, which ends `Tuner.fit`;
the driver records the reason on the parent run and the job FAILS with it. A retry resumes from the
trials' checkpoints once the pool has the node back (the scheduler keeps the retried job QUEUED, with a
reason, until the pool can hold it).

A node that is only busy is not a loss: totals are compared, not free resources, and any RUNNING trial
resets the wait (it will free its resources). Nor is a node the autoscaler has yet to add: a pending trial
that one of the node types it may add holds (`SMARTUNE_AUTOSCALER_NODE_TYPES`, worker.tune.placement) is
waited for however long that takes; only a trial that no live node and no node type holds ends the sweep.
The limit comes from `SMARTUNE_UNPLACEABLE_TIMEOUT_S` (worker.tune.settings; 0 turns the guard off).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.tune import Callback
from ray.tune.experiment import Trial

from worker.tune.placement import autoscaled_node_types, fits

logger = logging.getLogger(__name__)

CHECK_EVERY_S = 5.0  # the Tune loop steps about every 0.1 s; the node list is a GCS call


class UnplaceableTrials(RuntimeError):
    """No live node can hold the sweep's pending trials, and none is running."""


def live_node_totals() -> list[dict[str, float]]:
    """Each live node's total resources ({"CPU": 8.0, "GPU": 1.0, "memory": ...})."""
    return [dict(node["Resources"]) for node in ray.nodes() if node.get("Alive")]


def request_of(trial: Any) -> dict[str, float]:
    """A trial's whole request: its bundles summed."""
    return dict(trial.placement_group_factory.required_resources)


def placeable(trial: Any, nodes: list[dict[str, float]]) -> bool:
    """Whether the live nodes, by their totals, could hold the trial: all its bundles on one node when they
    must share one (one bundle, the sweeps' case, or STRICT_PACK), else each bundle on some node (a
    necessary condition only: the guard never fails a sweep that might still be placed)."""
    factory = trial.placement_group_factory
    if len(factory.bundles) == 1 or factory.strategy == "STRICT_PACK":
        return any(fits(request_of(trial), node) for node in nodes)
    return all(any(fits(bundle, node) for node in nodes) for bundle in factory.bundles)


def _describe(need: Mapping[str, float]) -> str:
    return ", ".join(f"{amount:g} {name}" for name, amount in sorted(need.items()) if amount > 0)


@dataclass
class UnplaceableGuard(Callback):
    limit_s: float
    nodes: Callable[[], list[dict[str, float]]] = live_node_totals
    clock: Callable[[], float] = time.monotonic
    since: float | None = field(default=None)  # when the sweep was first seen stuck (driver clock)
    checked: float = field(default=float("-inf"))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "since": None, "checked": float("-inf")}  # a restored sweep looks afresh

    def on_step_begin(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        now = self.clock()
        if now - self.checked < CHECK_EVERY_S:
            return
        self.checked = now
        pending = [t for t in trials if t.status == Trial.PENDING]
        if not pending or any(t.status == Trial.RUNNING for t in trials):
            self.since = None
            return
        # The node types from this attempt's environment, read here rather than kept: nothing new is pickled
        # into the experiment state (tests/worker/tune/test_pickled_paths.py), and a resumed sweep takes the
        # types its new attempt was given.
        nodes, types = self.nodes(), autoscaled_node_types()
        if any(placeable(t, nodes) for t in pending):
            self.since = None  # Ray is only slow to place it
            return
        if any(node.holds(request_of(t)) for t in pending for node in types):
            self.since = None  # the autoscaler is adding a node for it
            return
        need = request_of(pending[0])
        if self.since is None:
            self.since = now
            logger.warning("no live Ray node can hold a pending trial (%s); waiting up to %.0f s for one",
                           _describe(need), self.limit_s)  # fmt: skip
            return
        if now - self.since >= self.limit_s:
            most = {name: max((node.get(name, 0.0) for node in nodes), default=0.0) for name in need}
            raise UnplaceableTrials(
                f"{len(pending)} pending trial(s) need {_describe(need)} on one node, but for "
                f"{now - self.since:.0f} s no live Ray node has had that (at most "
                f"{', '.join(f'{v:g} {k}' for k, v in sorted(most.items()))} on one of {len(nodes)} live "
                "node(s)) and no trial was running"
                + (", and no node type the autoscaler may add holds them. " if types else ". ")
                + "The pool lost the node these trials need; retry the job once it is back: it resumes from "
                "its checkpoints (SMARTUNE_UNPLACEABLE_TIMEOUT_S sets this wait; 0 waits forever)"
            )
