"""The node types an autoscaler may add to the Ray cluster, as the deployment declares them: shared by the
control plane (admission and scheduling judge a job by what the pool can grow to) and the sweep driver (it
waits for such a node instead of refusing a trial that no live node holds yet).

One JSON list in `SMARTUNE_AUTOSCALER_NODE_TYPES`, one object per node type (a KubeRay worker group):

    [{"cpus": 8, "gpus": 1, "max_workers": 4, "gpu_memory_mb": 81559}]

`cpus` and `gpus` are what one node of the type offers Ray (its `--num-cpus` / `--num-gpus`), `max_workers`
how many of them the autoscaler may run at once (the group's `maxReplicas`), `gpu_memory_mb` the custom
resource of that name the node advertises (optional: MiB of all its GPUs). Pydantic and the standard
library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

NODE_TYPES_ENV = "SMARTUNE_AUTOSCALER_NODE_TYPES"  # the JSON list, for the control plane and the driver
# seconds a dispatched driver reads a cluster found short of its trial again (worker.tune.placement)
RESOURCES_GRACE_ENV = "SMARTUNE_RESOURCES_GRACE_S"
_EPS = 1e-9


class NodeType(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cpus: float = Field(ge=0, le=4096, description="CPUs one node of this type offers Ray")
    gpus: float = Field(0.0, ge=0, le=64, description="GPUs one node of this type offers Ray")
    max_workers: int = Field(ge=1, le=10_000, description="nodes of this type the autoscaler may run at once")
    gpu_memory_mb: float | None = Field(
        None, gt=0, description="the node's `gpu_memory_mb` resource: MiB of all its GPUs (trial packing)"
    )

    def fits(self, cpus: float, gpus: float) -> bool:
        """Whether one node of this type holds a trial of `cpus` CPUs and `gpus` GPUs."""
        return cpus <= self.cpus + _EPS and gpus <= self.gpus + _EPS

    def ray_resources(self) -> dict[str, float]:
        """The node's totals as Ray names them (`ray.nodes()`' "Resources"), for the driver's checks."""
        out = {"CPU": self.cpus, "GPU": self.gpus}
        if self.gpu_memory_mb is not None:
            out["gpu_memory_mb"] = self.gpu_memory_mb
        return {name: amount for name, amount in out.items() if amount}

    def holds(self, bundle: Mapping[str, float]) -> bool:
        """Whether one node of this type holds a Ray bundle (`{"CPU": 1, "GPU": 0.5, ...}`). Resources the
        type does not declare (a custom one, `gpu_memory_mb` left out) are not held against it: the node
        may well have them, and the driver must never give up on a trial that one could hold."""
        mine = self.ray_resources()
        declared = {"CPU", "GPU", *mine}
        return all(
            mine.get(name, 0.0) + _EPS >= amount
            for name, amount in bundle.items()
            if amount > 0 and name in declared
        )

    def describe(self) -> str:
        """`1 GPU, 8 CPUs` (for messages)."""
        gpus = [f"{self.gpus:g} GPU" + ("" if self.gpus == 1 else "s")] if self.gpus else []
        return ", ".join([*gpus, f"{self.cpus:g} CPU" + ("" if self.cpus == 1 else "s")])


def parse_node_types(text: str) -> tuple[NodeType, ...]:
    """The node types of `text` (the JSON list above); a ValueError names the entry and field at fault."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{NODE_TYPES_ENV}: not JSON ({err.msg} at character {err.pos})") from None
    if not isinstance(raw, list):
        raise ValueError(f'{NODE_TYPES_ENV}: expected a JSON list such as [{{"cpus": 8, "gpus": 1, '
                         f'"max_workers": 4}}], got {type(raw).__name__}')  # fmt: skip
    types = []
    for index, entry in enumerate(raw):
        try:
            types.append(NodeType.model_validate(entry))
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "entry"
            raise ValueError(f"{NODE_TYPES_ENV}[{index}].{where}: {first['msg']}") from None
    return tuple(types)


def dump_node_types(types: tuple[NodeType, ...] | list[NodeType]) -> str:
    """The JSON list `parse_node_types` reads (what the control plane hands the driver)."""
    return json.dumps([t.model_dump(exclude_none=True) for t in types], separators=(",", ":"))
