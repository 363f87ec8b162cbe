"""Where a GPU trial goes: the fullest node that still fits it (best fit), given to Ray as a soft hint.

Left to itself, Ray places a Tune trial (a one-bundle placement group) on the *emptiest* node that fits
(`LeastResourceScorer`): fractional trials spread over every node, and a trial of several whole GPUs then
waits for a node with that many free while the pool has them in pieces. research/pool_sim measured what that
costs a backlogged pool (83-87% busy against 95-97% with best fit; docs/pool_at_scale.md). So each GPU trial
names the node best fit would choose as `_soft_target_node_id` (the hint Ray Serve's compact scheduling
uses); where that node no longer fits when the group is scheduled, Ray places it as before, so a hint can
cost nothing but the packing. CPU trials keep Ray's rule: spreading them balances the hosts' load.

With an autoscaler the control plane passes the node types it may add (`SMARTUNE_AUTOSCALER_NODE_TYPES`,
worker.contract.node_types) and `SMARTUNE_WAIT_FOR_RESOURCES=1`: a trial that no live node holds yet but one
of those types would is waited for (Ray's autoscaler sees the pending trial and adds the node); one that no
type holds either is refused at the start, with the reason.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.tune import PlacementGroupFactory

from worker.contract.node_types import NODE_TYPES_ENV, RESOURCES_GRACE_ENV, NodeType, parse_node_types
from worker.contract.spec import JobSpec

logger = logging.getLogger(__name__)

_EPS = 1e-9
_TUNE_TO_RAY = {"cpu": "CPU", "gpu": "GPU"}  # custom resources keep their names

Room = Mapping[str, Mapping[str, float]]  # node id (hex) -> resource name -> amount available now


def bundle_of(request: Mapping[str, float]) -> dict[str, float]:
    """Tune's request (`{"cpu", "gpu", custom...}`) as the Ray bundle it becomes; zero amounts dropped."""
    return {_TUNE_TO_RAY.get(key, key): float(v) for key, v in request.items() if v}


def fits(bundle: Mapping[str, float], node: Mapping[str, float]) -> bool:
    """Whether `node`'s resources (free now, or its totals) hold every amount `bundle` asks for."""
    return all(node.get(name, 0.0) + _EPS >= amount for name, amount in bundle.items() if amount > 0)


def choose_node(bundle: Mapping[str, float], room: Room) -> str | None:
    """The node best fit picks for `bundle`: among the nodes with room for all of it, the one left with the
    fewest GPUs, then the least of the other resources it asks for (as a fraction of what it had), then the
    lowest id; None where no node has room now (Ray then queues the trial as usual)."""
    best: tuple[tuple[float, float, str], str] | None = None
    for node, free in room.items():
        if not fits(bundle, free):
            continue
        gpus_left = free.get("GPU", 0.0) - bundle.get("GPU", 0.0)
        others_left = sum(
            (free[name] - amount) / free[name]
            for name, amount in bundle.items()
            if name != "GPU" and free.get(name, 0.0) > 0
        )
        key = (round(gpus_left, 6), others_left, node)
        if best is None or key < best[0]:
            best = (key, node)
    return best[1] if best else None


def live_room() -> dict[str, dict[str, float]]:
    """What each live node has available now, as the GCS last heard it (Ray's developer API)."""
    from ray._private.state import available_resources_per_node

    return {node: dict(free) for node, free in available_resources_per_node().items()}


class HintedPlacement(PlacementGroupFactory):
    """A one-bundle request whose identity leaves out its node hint. Tune reuses a finished trial's actor
    (and its placement group) for a trial with an *equal* request; with the hint in the identity, every
    trial would start a new actor. A reused slot is where this job's last trial ran: packed already."""

    def _identity(self) -> str:
        return json.dumps({"bundles": self.bundles, "strategy": self.strategy}, sort_keys=True)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HintedPlacement):
            return NotImplemented
        return (
            self._identity() == other._identity() and self.head_bundle_is_empty == other.head_bundle_is_empty
        )

    def __hash__(self) -> int:
        return hash(self._identity())


@dataclass
class BestFit:
    """Tune's per-trial resources (`tune.with_resources(trainable, BestFit(request))`): called once per
    trial when Tune creates it, which under `max_concurrent_trials` is when a slot frees, so the view of the
    cluster is current. Trials created in one burst (a sweep's first wave) would all see the same view, so
    each hint is also remembered for `claim_ttl_s` and subtracted until the cluster's view has caught up.
    Plain data and a module-level `room` function: Tune pickles it with the trainable."""

    request: dict[str, float]
    claim_ttl_s: float = 5.0
    room: Callable[[], Room] = live_room
    claims: list[tuple[float, str, dict[str, float]]] = field(default_factory=list)

    def __call__(self, config: Mapping[str, Any] | None = None) -> PlacementGroupFactory:
        bundle = bundle_of(self.request)
        try:
            room = self._room_less_claims()
        except Exception as err:  # a hint is an optimisation: without a view, Ray places as it would
            logger.warning("no view of the nodes' free resources (%s): Ray places this trial", err)
            room = {}
        node = choose_node(bundle, room)
        if node is None:
            return HintedPlacement([bundle], strategy="STRICT_PACK")
        self.claims.append((time.monotonic(), node, bundle))
        return HintedPlacement([bundle], strategy="STRICT_PACK", _soft_target_node_id=node)

    def _room_less_claims(self) -> dict[str, dict[str, float]]:
        now = time.monotonic()
        self.claims = [c for c in self.claims if now - c[0] < self.claim_ttl_s]
        room = {node: dict(free) for node, free in self.room().items()}
        for _, node, bundle in self.claims:
            free = room.get(node)
            for name, amount in bundle.items():
                if free is not None and name in free:
                    free[name] -= amount
        return room


def trial_resources(request: Mapping[str, float], placement: str = "best-fit") -> dict[str, float] | BestFit:
    """What `tune.with_resources` gets: best-fit hints for a GPU trial under `placement="best-fit"` (the
    worker setting SMARTUNE_TRIAL_PLACEMENT), the plain request otherwise (Ray's own rule)."""
    return BestFit(dict(request)) if request.get("gpu") and placement == "best-fit" else dict(request)


def autoscaled_node_types(environ: Mapping[str, str] = os.environ) -> tuple[NodeType, ...]:
    """The node types an autoscaler may add, as the control plane passed them; none when it passed none."""
    raw = environ.get(NODE_TYPES_ENV, "")
    return parse_node_types(raw) if raw.strip() else ()


def autoscaled_node_rows(environ: Mapping[str, str] = os.environ) -> list[dict[str, Any]]:
    """The node types as rows shaped like `ray.nodes()`' (one per type), for what the driver derives from
    the nodes' sizes before any node of a type is up (the GPUs' memory, a whole node's CPUs)."""
    return [{"Alive": True, "Resources": t.ray_resources()} for t in autoscaled_node_types(environ)]


GRACE_POLL_S = 2.0


def check_resources(
    spec: JobSpec,
    request: Mapping[str, float] | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Refuse a trial that asks for more than the whole cluster has, unless an autoscaler may add a node
    that holds it (the node types passed, or any with SMARTUNE_WAIT_FOR_RESOURCES alone). With
    SMARTUNE_RESOURCES_GRACE_S (seconds) a cluster found short is read again for that long first: the
    control plane dispatched the job because its pool held the trial, and right after a Ray head restarts
    its worker nodes may still be leaving or rejoining (a node the new head listed at admission was gone
    ten seconds later, then back), which is no reason to fail the job."""
    # the trial's request (tuning.resources: its GPUs packed by memory, the memory), else the spec's own
    need = bundle_of(
        request if request is not None else {"cpu": spec.resources.cpus, "gpu": spec.resources.gpus}
    )
    deadline = clock() + float(os.environ.get(RESOURCES_GRACE_ENV) or 0)
    while True:
        have = ray.cluster_resources()
        short = {k: v for k, v in need.items() if v > 0 and have.get(k, 0.0) < v}
        if not short:
            return
        if clock() >= deadline or autoscaled_node_types() or os.environ.get("SMARTUNE_WAIT_FOR_RESOURCES"):
            break
        logger.info("a trial needs %s and the Ray cluster has %s: reading it again (its nodes may be "
                    "rejoining a restarted head)", short, {k: have.get(k, 0.0) for k in short})  # fmt: skip
        sleep(GRACE_POLL_S)
    wanted = ", ".join(f"{v:g} {k}" for k, v in short.items())
    has = ", ".join(f"{have.get(k, 0.0):g} {k}" for k in short)
    types = autoscaled_node_types()
    if types:
        node = next((t for t in types if t.holds(need)), None)
        if node is None:
            raise RuntimeError(
                f"a trial needs {wanted} but the Ray cluster has {has}, and no node type the autoscaler may "
                f"add holds it ({'; '.join(t.describe() for t in types)})"
            )
        logger.info("a trial needs %s and the Ray cluster has %s: waiting for the autoscaler to add a node "
                    "(a node of type %s holds it)", wanted, has, node.describe())  # fmt: skip
        return
    if not os.environ.get("SMARTUNE_WAIT_FOR_RESOURCES"):
        raise RuntimeError(
            f"a trial needs {wanted} but the Ray cluster has {has}; set SMARTUNE_WAIT_FOR_RESOURCES=1 "
            "to wait for an autoscaler instead"
        )
