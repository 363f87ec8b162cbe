"""Shared fixtures of the sweep tests: the session's real Ray head, a real MLflow SQLite store.

The head is started once per session (tests/conftest.py `ray_head`), with 4 CPUs and 2 *logical* GPUs (Ray
counts them without hardware: enough to test GPU placement on a machine without GPUs), and shared by every
test that asks for `ray_cluster`. Each test gives its sweep
its own job id; all sweeps of the session share one data dir (Tune storage, mlflow.db, mlartifacts).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from mlflow import MlflowClient
from mlflow.entities import Run

from worker.tune.settings import Settings
from worker.tune.tracking import TrackingTarget, find_runs

if TYPE_CHECKING:
    from tests.support.cluster import RayHead


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test here may touch the network: offline env vars plus a socket that refuses to connect."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise OSError("network access is disabled in tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.fixture(scope="session")
def ray_cluster(ray_head: RayHead) -> Iterator[dict[str, float]]:
    """The test process as a driver of the session's Ray head (tests/conftest.py `ray_head`: 4 CPUs, 2
    logical GPUs), which the integration tests' servers share: one idle cluster per xdist worker, not two.
    An integration test's job that outlives its test only delays a sweep test's trials."""
    import ray
    from ray._private.authentication.authentication_token_setup import _enable_token_auth

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # The head wants token auth (tests/support/cluster.py): RAY_AUTH_MODE=token for this process and the driver
    # processes a test starts, and Ray's cached config re-read (the process may have read it already).
    _enable_token_auth()
    started = not ray.is_initialized()
    if started:
        ray.init(address=ray_head.gcs_address)
    yield ray.cluster_resources()
    if started:
        ray.shutdown()


@pytest.fixture(scope="session")
def sweep_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    data_dir = tmp_path_factory.mktemp("smartune-data")
    settings = Settings.from_env({"SMARTUNE_DATA_DIR": str(data_dir)})
    settings.prepare()
    return settings


SpecFactory = Callable[..., dict[str, Any]]


def _runs_of(settings: Settings, job_id: str) -> tuple[Run, list[Run]]:
    client = MlflowClient(settings.tracking_uri)
    experiment = client.get_experiment_by_name(settings.experiment)
    assert experiment is not None
    target = TrackingTarget(settings.tracking_uri, experiment.experiment_id, job_id)
    parents = find_runs(client, target, kind="sweep")
    children = [r for r in find_runs(client, target) if "smartune.trial_id" in r.data.tags]
    assert len(parents) == 1, parents
    return parents[0], sorted(children, key=lambda r: r.data.tags["smartune.trial_id"])


def _history(settings: Settings, run: Run, key: str) -> dict[int, float]:
    client = MlflowClient(settings.tracking_uri)
    points = sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: (m.step, m.timestamp))
    return {m.step: m.value for m in points}


@pytest.fixture
def job_runs(sweep_settings: Settings) -> Callable[[str], tuple[Run, list[Run]]]:
    """job id -> (its parent run, its child runs sorted by trial id), read back from MLflow."""
    return lambda job_id: _runs_of(sweep_settings, job_id)


@pytest.fixture
def metric_history(sweep_settings: Settings) -> Callable[[Run, str], dict[int, float]]:
    """(run, metric) -> {step: value}, the last value logged at each step."""
    return lambda run, key: _history(sweep_settings, run, key)


@pytest.fixture
def tiny_spec(glue_dir: Path) -> SpecFactory:
    """Builds job spec documents for tiny-random on a slice of real RTE: seconds per trial."""
    return lambda **fields: _tiny_spec(glue_dir, **fields)


def _tiny_spec(glue_dir: Path, **fields: Any) -> dict[str, Any]:
    training = {"epochs": 2, "batch_size": 8, "learning_rate": 1e-3, "max_train_samples": 32,
                "max_eval_samples": 16, "max_seq_length": 64}  # fmt: skip
    training |= fields.pop("training", {})
    spec: dict[str, Any] = {
        "task": "rte",
        "data": str(glue_dir),
        "model": "tiny-random",
        "method": "smart",
        "method_params": {"epsilon": 1e-3},
        "training": training,
        "resources": {"cpus": 1},
        # One trial at a time unless a test is about two running at once: Tune reuses the one worker process
        # (no second start of torch and MLflow), and the 2-core machine runs the other tests beside it.
        "limits": {"max_concurrent_trials": 1, "max_retries": 1},
    }
    spec.update(fields)
    return spec
