"""deploy/k8s scales its GPU pods from zero (issue 30): the head offers no CPUs and no GPUs and the GPU group
starts at zero pods, so the API must be told what KubeRay's autoscaler may add (`SMARTUNE_AUTOSCALER`,
`SMARTUNE_AUTOSCALER_NODE_TYPES`), and what it is told must be that group."""

from __future__ import annotations

import json

from service.config import Settings
from tests.deploy.test_k8s import containers, literal, one
from worker.contract.node_types import NodeType


def test_the_api_declares_the_gpu_group_the_autoscaler_adds() -> None:
    spec = one("RayCluster")["spec"]
    assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"  # nothing runs before a pod is added
    (gpu,) = [g for g in spec["workerGroupSpecs"] if g["groupName"] == "gpu"]
    assert gpu["minReplicas"] == 0
    (worker,) = gpu["template"]["spec"]["containers"]
    limits = worker["resources"]["limits"]
    advertised = json.loads(json.loads(gpu["rayStartParams"]["resources"]))  # KubeRay's quoted JSON
    group = NodeType(cpus=float(limits["cpu"]), gpus=float(limits["nvidia.com/gpu"]),
                     max_workers=gpu["maxReplicas"], gpu_memory_mb=advertised["gpu_memory_mb"])  # fmt: skip

    (api,) = [c for where, c in containers() if where == "Deployment/smartune-api"]
    settings = Settings(
        autoscaler=literal(api, "SMARTUNE_AUTOSCALER"),
        autoscaler_node_types=literal(api, "SMARTUNE_AUTOSCALER_NODE_TYPES"),
    )
    assert settings.autoscaled_node_types == (group,)
