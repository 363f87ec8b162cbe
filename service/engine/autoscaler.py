"""The pool with an autoscaler: what admission and the scheduler judge a job by when Ray adds nodes on demand.

With `SMARTUNE_AUTOSCALER=1` the live pool is not the limit: a KubeRay GPU group scaled to zero pods reads as
a pool of no GPUs, and Ray's autoscaler starts a pod only once a trial asks for one. So a job is judged by
the pool's *reach* instead: each declared node type (`SMARTUNE_AUTOSCALER_NODE_TYPES`) times its
`max_workers`, or the live pool where that is larger (a head with CPUs of its own, nodes outside the
types). A trial can run when one node type holds it, or, as without an autoscaler, the live pool's totals
do. A job admitted while the live pool has no room for its first trial is dispatched all the same: its
driver waits for the autoscaler (`SMARTUNE_WAIT_FOR_RESOURCES`), and its timeline says for which node.
Pure: no database, no Ray.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from service.engine.scheduler import Resources
from worker.contract.node_types import NodeType

_EPS = 1e-9


def _count(n: float, unit: str) -> str:
    return f"{n:g} {unit}" + ("" if n == 1 else "s")


def amounts(cpus: float, gpus: float) -> str:
    """`1 GPU, 2 CPUs` (GPUs first: what a GPU trial waits for)."""
    return ", ".join(([_count(gpus, "GPU")] if gpus > 0 else []) + [_count(cpus, "CPU")])


@dataclass(frozen=True)
class Autoscaler:
    node_types: tuple[NodeType, ...]

    @classmethod
    def of(cls, node_types: Sequence[NodeType]) -> Autoscaler | None:
        """The autoscaler of these node types (`Settings.autoscaled_node_types`); None without any."""
        return cls(tuple(node_types)) if node_types else None

    def ceiling(self) -> Resources:
        """Every node type at its `max_workers`: the most the autoscaler runs at once."""
        return Resources(
            sum(t.cpus * t.max_workers for t in self.node_types),
            sum(t.gpus * t.max_workers for t in self.node_types),
        )

    def reach(self, live: Resources | None) -> Resources:
        """The pool a job is judged by: the ceiling, or the live pool (None: unread) where it is larger."""
        ceiling = self.ceiling()
        if live is None:
            return ceiling
        return Resources(max(live.cpus, ceiling.cpus), max(live.gpus, ceiling.gpus))

    def node_for(self, cpus: float, gpus: float) -> NodeType | None:
        """The smallest node type (fewest GPUs, then CPUs) that holds one trial; None when none does."""
        fitting = [t for t in self.node_types if t.fits(cpus, gpus)]
        return min(fitting, key=lambda t: (t.gpus, t.cpus), default=None)

    def largest(self) -> Resources:
        """The most CPUs and the most GPUs of any one node type (for messages)."""
        return Resources(max(t.cpus for t in self.node_types), max(t.gpus for t in self.node_types))

    def runs(self, cpus: float, gpus: float, live: Resources | None) -> bool:
        """Whether a trial can ever run: a node type holds it, or the live pool's totals do."""
        if self.node_for(cpus, gpus) is not None:
            return True
        return live is not None and cpus <= live.cpus + _EPS and gpus <= live.gpus + _EPS

    def too_large(self, cpus: float, gpus: float, live: Resources | None) -> str | None:
        """Why no node could ever hold the trial (for a wait reason or a refusal); None when one could."""
        if self.runs(cpus, gpus, live):
            return None
        big = self.largest()
        pool = "the pool is unread" if live is None else (
            f"the live pool has {_count(live.gpus, 'GPU')}, {_count(live.cpus, 'CPU')}")  # fmt: skip
        return (f"no node can hold a trial of {amounts(cpus, gpus)}: {pool}, and the autoscaler's largest node "
                f"types have {_count(big.gpus, 'GPU')}, {_count(big.cpus, 'CPU')}")  # fmt: skip

    def waits_for(self, cpus: float, gpus: float, live_free: Resources) -> str | None:
        """What an admitted job waits for when the live pool has no room for its first trial now: the
        autoscaler's next node (None when the live pool has room)."""
        if cpus <= live_free.cpus + _EPS and gpus <= live_free.gpus + _EPS:
            return None
        node = self.node_for(cpus, gpus)
        kind = f" (a node of type {node.describe()})" if node is not None else ""
        gpus_free, cpus_free = (
            _count(max(live_free.gpus, 0.0), "GPU"),
            _count(max(live_free.cpus, 0.0), "CPU"),
        )
        return (f"waiting for the autoscaler to add a node with {amounts(cpus, gpus)}{kind}; the live pool has "
                f"{gpus_free}, {cpus_free} free")  # fmt: skip
