"""The driver under an autoscaler (issue 30): the node types the control plane passes
(`SMARTUNE_AUTOSCALER_NODE_TYPES`) let a trial that no live node holds yet through the start-up check and
the unplaceable guard, and a trial that no type holds either still fails, with the reason. A real sweep on
Ray's own autoscaler is tests/integration/test_autoscaling_server.py."""

from __future__ import annotations

import pytest
from ray.tune.experiment import Trial

from worker.contract.node_types import NODE_TYPES_ENV
from worker.contract.spec import JobSpec
from worker.tune import placement
from worker.tune.placement import autoscaled_node_rows, check_resources
from worker.tune.tuning import gpu_memory_per_gpu, node_cpus
from worker.tune.unplaceable_guard import CHECK_EVERY_S, UnplaceableGuard, UnplaceableTrials

GPU_GROUP = '[{"cpus": 8, "gpus": 1, "max_workers": 4, "gpu_memory_mb": 81559}]'


def _spec(gpus: float) -> JobSpec:
    return JobSpec.model_validate({"name": "t", "task": "rte", "model": "tiny-random",
                                   "resources": {"cpus": 1, "gpus": gpus}})  # fmt: skip


@pytest.fixture
def empty_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """A head that offers nothing, its GPU workers scaled to zero."""
    monkeypatch.setattr(placement.ray, "cluster_resources", lambda: {"memory": 1e9})
    monkeypatch.delenv("SMARTUNE_WAIT_FOR_RESOURCES", raising=False)


@pytest.mark.usefixtures("empty_cluster")
def test_a_trial_a_node_type_holds_is_waited_for_and_one_none_holds_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(RuntimeError, match="set SMARTUNE_WAIT_FOR_RESOURCES=1"):
        check_resources(_spec(1))  # no autoscaler: refused as before
    monkeypatch.setenv(NODE_TYPES_ENV, GPU_GROUP)
    check_resources(_spec(1))  # the autoscaler will add a node of 8 CPUs and 1 GPU
    check_resources(_spec(1), {"cpu": 1, "gpu": 1, "gpu_memory_mb": 81559})  # its memory too
    with pytest.raises(RuntimeError, match=r"no node type the autoscaler may add holds it \(1 GPU, 8 CPUs\)"):
        check_resources(_spec(2))


def test_the_node_types_size_the_request_before_any_node_is_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NODE_TYPES_ENV, GPU_GROUP)
    head = {"Alive": True, "Resources": {"memory": 1e9}}
    nodes = [head, *autoscaled_node_rows()]
    assert gpu_memory_per_gpu(nodes) == 81559  # fractions pack by the GPU's memory as on a live node
    assert node_cpus(nodes, 1) == 8  # a CPU trial retried alone after running out of memory gets a node
    monkeypatch.delenv(NODE_TYPES_ENV)
    assert autoscaled_node_rows() == []


class _Factory:
    def __init__(self, gpus: float) -> None:
        self.bundles, self.strategy = [{"CPU": 1.0, "GPU": gpus}], "PACK"
        self.required_resources = dict(self.bundles[0])


class _Trial:
    def __init__(self, gpus: float) -> None:
        self.status, self.placement_group_factory = Trial.PENDING, _Factory(gpus)


def test_the_guard_waits_for_the_autoscaler_but_not_for_a_node_no_type_can_be(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(NODE_TYPES_ENV, GPU_GROUP)
    clock = [0.0]
    guard = UnplaceableGuard(30.0, nodes=lambda: [{"CPU": 0.0}], clock=lambda: clock[0])
    for _ in range(20):  # 100 s with no live node for the trial: the autoscaler is adding one
        clock[0] += CHECK_EVERY_S
        guard.on_step_begin(0, [_Trial(1)])
    assert guard.since is None
    clock[0] += CHECK_EVERY_S
    guard.on_step_begin(0, [_Trial(2)])  # two GPUs on one node: no type has them
    clock[0] += 30.0
    with pytest.raises(UnplaceableTrials, match="no node type the autoscaler may add holds them"):
        guard.on_step_begin(0, [_Trial(2)])


@pytest.mark.usefixtures("empty_cluster")
def test_a_cluster_found_short_is_read_again_for_the_grace_the_control_plane_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job dispatched right after its Ray head restarted: the worker node the new head listed at admission
    leaves and rejoins, and the driver waits for it instead of failing (SMARTUNE_RESOURCES_GRACE_S)."""
    now = [0.0]
    reads = iter([{"memory": 1e9}, {"memory": 1e9}, {"CPU": 2.0, "GPU": 1.0}])
    monkeypatch.setattr(placement.ray, "cluster_resources", lambda: next(reads))
    monkeypatch.setenv(placement.RESOURCES_GRACE_ENV, "120")
    check_resources(_spec(1), clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert now[0] == 2 * placement.GRACE_POLL_S  # read three times, two waits
    monkeypatch.setattr(placement.ray, "cluster_resources", lambda: {"memory": 1e9})  # it never comes back
    now[0] = 0.0
    with pytest.raises(RuntimeError, match="set SMARTUNE_WAIT_FOR_RESOURCES=1"):
        check_resources(_spec(1), clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert now[0] >= 120
    monkeypatch.delenv(placement.RESOURCES_GRACE_ENV)  # by hand (`smartune sweep`): refused at once
    with pytest.raises(RuntimeError):
        check_resources(_spec(1), clock=lambda: 0.0, sleep=lambda s: pytest.fail("waited"))
