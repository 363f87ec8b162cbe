"""Memory-aware packing on the worker side (worker.tune.tuning): a trial's Ray request from the spec's
`gpu_memory_mb` and the nodes' advertised `gpu_memory_mb`, the driver's resource check, and the retry of a
trial that ran out of memory alone: unit tests with fakes behind Tune's interfaces, then one real Tune run
on the session's Ray cluster (2 CPUs, 2 logical GPUs, no hardware) whose trial raises torch's
OutOfMemoryError until it holds a whole GPU."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from ray import cloudpickle, tune

from worker.contract.errors import classify
from worker.contract.spec import JobSpec
from worker.tune import sweep
from worker.tune.epoch_report import gpu_peak
from worker.tune.placement import check_resources
from worker.tune.tuning import (
    GPU_MEMORY,
    AloneAfterOom,
    alone,
    gpu_memory_per_gpu,
    node_cpus,
    resources,
)

H100 = 81_559.0  # MiB, torch.cuda.get_device_properties(0).total_memory >> 20 of an H100 80GB


def _spec(**resources_: Any) -> JobSpec:
    return JobSpec.model_validate({"task": "rte", "resources": resources_})


def _node(cpus: float, gpus: float = 0, memory: float | None = None, alive: bool = True) -> dict[str, Any]:
    res = {"CPU": cpus, **({"GPU": gpus} if gpus else {}), **({GPU_MEMORY: memory} if memory else {})}
    return {"Alive": alive, "Resources": res}


def test_nodes_give_the_smallest_advertised_gpu() -> None:
    nodes = [
        _node(16, 8, 8 * H100),
        _node(8, 2, 2 * 40_000),
        _node(4),
        _node(8, 1),
        _node(8, 1, 10, alive=False),
    ]
    assert gpu_memory_per_gpu(nodes) == 40_000
    assert gpu_memory_per_gpu([_node(4), _node(8, 1)]) is None  # nobody advertises: pack by fraction only
    assert node_cpus(nodes, 6) == 8 and node_cpus(nodes, 1) == 4 and node_cpus(nodes, 64) == 64


def test_a_trial_asks_for_its_packed_fraction_and_its_memory() -> None:
    spec = _spec(cpus=2, gpus=0.1, gpu_memory_mb=30_000)
    assert resources(spec, H100) == {"cpu": 2, "gpu": 0.375, GPU_MEMORY: 30_000}
    assert resources(spec, None) == {"cpu": 2, "gpu": 0.1}  # nodes advertise nothing: no custom resource
    assert resources(_spec(gpus=0.25), H100) == {"cpu": 1.0, "gpu": 0.25}  # no figure (a local sweep)
    assert resources(_spec(gpus=2, gpu_memory_mb=30_000), H100) == {
        "cpu": 1.0,
        "gpu": 2,
        GPU_MEMORY: 2 * 81_559,
    }
    assert resources(_spec(gpus=0.5, gpu_memory_mb=90_000), H100) == {
        "cpu": 1.0,
        "gpu": 1.0,
        GPU_MEMORY: 81_559,
    }
    assert resources(_spec(cpus=3), H100) == {"cpu": 3}


def test_alone_is_a_whole_gpu_or_a_whole_node() -> None:
    assert alone(_spec(gpus=0.25, gpu_memory_mb=9000), H100, 16) == {
        "cpu": 1.0,
        "gpu": 1.0,
        GPU_MEMORY: 81_559,
    }
    assert alone(_spec(gpus=0.25), None, 16) == {"cpu": 1.0, "gpu": 1.0}
    assert alone(_spec(gpus=2, gpu_memory_mb=9000), H100, 16)["gpu"] == 2.0
    assert alone(_spec(cpus=1), None, 16) == {"cpu": 16}  # a CPU trial: the host's memory ran out


def test_the_driver_checks_the_packed_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SMARTUNE_WAIT_FOR_RESOURCES", raising=False)
    monkeypatch.setattr(sweep.ray, "cluster_resources", lambda: {"CPU": 8.0, "GPU": 1.0})
    spec = _spec(gpus=0.25, gpu_memory_mb=9000)
    check_resources(spec, resources(spec, None))  # fits: nobody asked for memory
    with pytest.raises(RuntimeError, match="gpu_memory_mb"):
        check_resources(spec, resources(spec, H100))  # the cluster advertises no memory at all


class FakeTrial:
    """What AloneAfterOom and worker.tune.trial_error read of a Tune Trial."""

    def __init__(self, tmp_path: Path, error: BaseException) -> None:
        self.trial_id = "t1"
        self.pickled_error_file = str(tmp_path / "error.pkl")
        self.error_file = str(tmp_path / "error.txt")
        Path(self.pickled_error_file).write_bytes(cloudpickle.dumps(error))
        self.requests: list[dict[str, float]] = []

    def update_resources(self, request: dict[str, float]) -> None:
        self.requests.append(request)


def test_only_an_oom_retry_changes_the_request(tmp_path: Path) -> None:
    request = {"cpu": 1.0, "gpu": 1.0}
    callback = AloneAfterOom(request)
    oom = FakeTrial(tmp_path, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    callback.on_trial_recover(1, [], oom)  # type: ignore[arg-type]
    assert oom.requests == [request]
    other = FakeTrial(tmp_path, ValueError("a bad learning rate"))
    callback.on_trial_recover(1, [], other)  # type: ignore[arg-type]
    assert other.requests == []


def test_a_cuda_oom_is_class_oom_and_cpu_trials_log_no_peak() -> None:
    assert classify(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")) == "oom"
    if not torch.cuda.is_available():
        assert gpu_peak() == {}


def _flaky(config: dict[str, Any]) -> None:
    """Runs out of (fake) GPU memory unless it holds a whole GPU."""
    import torch
    from ray import tune

    gpu = tune.get_context().get_trial_resources().required_resources.get("GPU", 0.0)
    if gpu < 1:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (fake, on CPU)")
    tune.report({"gpu": gpu, "x": config["x"]})


def test_a_trial_out_of_memory_is_retried_alone_on_a_gpu(
    ray_cluster: dict[str, float], tmp_path: Path
) -> None:
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # a test module is not importable on workers
    spec = _spec(cpus=1, gpus=0.5)
    tuner = tune.Tuner(
        tune.with_resources(_flaky, resources(spec, None)),
        param_space={"x": 1},
        run_config=tune.RunConfig(
            name="oom-alone",
            storage_path=str(tmp_path),
            failure_config=tune.FailureConfig(max_failures=1),  # limits.max_retries' default
            callbacks=[AloneAfterOom(alone(spec, None, 2))],
            verbose=0,
        ),
    )
    (result,) = tuner.fit()
    assert result.error is None and result.metrics["gpu"] == 1.0  # it first asked for 0.5: the retry held 1
