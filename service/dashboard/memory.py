"""The pool page's GPU memory: what the nodes advertise and what running trials reserve (docs/memory_packing.md).

Nodes come from the Ray adapter's `nodes()` when it offers one (rows with `node`, `resources_total` and, where
Ray reports it, `resources_available`): per node its GPUs, its `gpu_memory_mb` and, with the available
figures, what trials hold there. Running trials come from the job store: each trial logs the `GPU` fraction
and `gpu_memory_mb` it was given (worker.tune.trainable, metrics `gpu_fraction` and
`gpu_memory_reserved_mb`); a trial that has not logged them yet counts at its job's spec. A team's key sees
its own jobs by id and the other teams' as one total.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.api.deps import Principal
from service.engine.ray_jobs import RayJobError, RayUnavailable
from service.store.models import Job, Trial

logger = logging.getLogger(__name__)
GPU_MEMORY = "gpu_memory_mb"  # the Ray custom resource (worker.tune.tuning.GPU_MEMORY)


def ray_nodes(ray: Any) -> list[Mapping[str, Any]] | None:
    """The adapter's nodes, or None when it lists none (no `nodes()`, or Ray does not answer)."""
    listing = getattr(ray, "nodes", None)
    if listing is None:
        return None
    try:
        return list(listing())
    except (RayUnavailable, RayJobError) as err:
        logger.info("pool page: no node list from Ray: %s", err)
        return None


def per_gpu(fraction: float) -> int:
    """Trials of `fraction` GPU each that one GPU holds (a whole-GPU trial: 1)."""
    return 1 if fraction >= 1 or fraction <= 0 else math.floor(1 / fraction + 1e-9)


def _node_rows(nodes: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for node in nodes:
        total = node.get("resources_total") or {}
        available = node.get("resources_available")
        gpus, memory = float(total.get("GPU", 0)), float(total.get(GPU_MEMORY, 0))
        if not gpus:
            continue
        held = None if available is None else memory - float(available.get(GPU_MEMORY, 0))
        rows.append({"node": str(node.get("node", "?")), "gpus": gpus, "gpu_memory_mb": memory or None,
                     "per_gpu_mb": memory / gpus if memory else None, "reserved_mb": held})  # fmt: skip
    return rows


def _spec_resources(spec_json: str) -> tuple[float, float | None]:
    resources = json.loads(spec_json).get("resources", {})
    return float(resources.get("gpus", 0)), resources.get(GPU_MEMORY)


def memory_section(
    session: Session, principal: Principal, nodes: list[Mapping[str, Any]] | None
) -> dict[str, Any]:
    """Nodes (GPU memory, reserved where Ray says), running GPU trials per job, and the totals."""
    running = session.execute(
        select(Job.id, Job.team_id, Job.spec_json, Trial.metrics)
        .join(Trial, Trial.job_id == Job.id)
        .where(Trial.state == "RUNNING", Job.gpus_per_trial > 0)
    )
    jobs: dict[str, dict[str, Any]] = {}
    others = {"trials": 0, "reserved_mb": 0.0}
    for job_id, team_id, spec_json, metrics in running:
        gpus, mb = _spec_resources(spec_json)
        metrics = metrics or {}
        fraction = float(metrics.get("gpu_fraction") or gpus)
        mb = metrics.get("gpu_memory_reserved_mb") or mb
        if principal.scope is not None and principal.scope != team_id:
            others["trials"] += 1
            others["reserved_mb"] += float(mb or 0)
            continue
        row = jobs.setdefault(job_id, {"job_id": job_id, "trials": 0, "reserved_mb": 0.0, "mb_per_trial": mb,
                                       "gpu_fraction": fraction, "trials_per_gpu": per_gpu(fraction)})  # fmt: skip
        row["trials"] += 1
        row["reserved_mb"] += float(mb or 0)
    node_rows = _node_rows(nodes) if nodes is not None else None
    total = sum(n["gpu_memory_mb"] or 0 for n in node_rows) if node_rows else None
    reserved = sum(j["reserved_mb"] for j in jobs.values()) + others["reserved_mb"]
    return {"nodes": node_rows, "total_mb": total or None, "reserved_mb": reserved, "jobs": list(jobs.values()),
            "others": others if others["trials"] else None}  # fmt: skip
