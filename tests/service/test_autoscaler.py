"""Scaling from zero (issue 30): with `SMARTUNE_AUTOSCALER` a job is admitted and dispatched against the node
types the autoscaler may add, though the live pool has none of what it needs; the driver is told to wait
for them. Fake Ray here; the real autoscaler (Ray's own, on fake nodes) is in
tests/integration/test_autoscaling_server.py."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.config import Settings
from service.engine import pool
from service.engine.autoscaler import Autoscaler
from service.engine.dispatch import submission
from service.engine.pool import PoolState
from service.engine.rounds import Engine
from service.engine.scheduler import QueuedJob, Resources, TeamState
from service.store.db import Database
from tests.service.fakes import FakeRay
from tests.service.utils import auth, make_team, spec, submit
from worker.contract.node_types import NODE_TYPES_ENV, NodeType, parse_node_types

GPU_NODE = NodeType(cpus=8, gpus=1, max_workers=2, gpu_memory_mb=81559)


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The KubeRay shape: GPU nodes of 8 CPUs and 1 GPU, at most 2 of them."""
    return settings.model_copy(update={"autoscaler": True, "autoscaler_node_types": (GPU_NODE,)})


@pytest.fixture
def fake_ray() -> FakeRay:
    """A head that offers nothing (`num-cpus: 0`) and no worker yet: the pool reads as zero."""
    return FakeRay(cpus=0.0, gpus=0.0)


def _job(client: TestClient, key: str, job_id: str) -> dict[str, Any]:
    return dict(client.get(f"/api/v1/jobs/{job_id}", headers=auth(key)).json())


def _queued(job_id: str, team: int, at: float, *, gpus: float = 1.0, peak: int = 1) -> QueuedJob:
    return QueuedJob(job_id, team, 0, at, 1.0, gpus, 1.0 * peak, gpus * peak)


def _state(*jobs: QueuedJob, teams: dict[int, TeamState] | None = None) -> PoolState:
    teams = teams or {1: TeamState(id=1, name="a"), 2: TeamState(id=2, name="b")}
    return PoolState(list(jobs), teams, Resources(0.0, 0.0), {}, {}, {})


def test_the_reach_is_every_node_type_at_its_maximum_or_the_live_pool_where_larger() -> None:
    scaler = Autoscaler((GPU_NODE, NodeType(cpus=4, max_workers=3)))
    assert scaler.ceiling() == Resources(28.0, 2.0)
    assert scaler.reach(None) == scaler.reach(Resources(0.0, 0.0)) == Resources(28.0, 2.0)
    assert scaler.reach(Resources(64.0, 1.0)) == Resources(64.0, 2.0)  # a large static head counts
    assert scaler.node_for(1, 0) == NodeType(cpus=4, max_workers=3)  # the smallest that holds it
    assert scaler.node_for(1, 1) == GPU_NODE and scaler.node_for(1, 2) is None
    assert scaler.runs(1, 2, Resources(16.0, 2.0))  # no type, but the live pool's totals hold it
    assert Autoscaler.of(()) is None


def test_an_empty_pool_admits_a_gpu_job_and_says_it_waits_for_the_autoscaler() -> None:
    scaler = Autoscaler((GPU_NODE,))
    state = _state(_queued("a1", 1, 1), _queued("b1", 2, 2), _queued("c1", 2, 3))
    decided = pool.plan_round(state, Resources(0.0, 0.0), scaler)
    assert decided.admitted == ["a1", "b1"]  # two nodes at most: two GPUs
    wait = "waiting for the autoscaler to add a node with 1 GPU, 1 CPU (a node of type 1 GPU, 8 CPUs)"
    assert decided.waits["a1"] == f"{wait}; the live pool has 0 GPUs, 0 CPUs free"
    assert decided.reasons["a1"].startswith("admitted: ") and decided.reasons["a1"].endswith(
        decided.waits["a1"]
    )
    assert decided.reasons["c1"] == "pool full: needs 1 GPU, 0 free"
    # Without the autoscaler the same pool admits nothing, and says the pool is too small.
    alone = pool.plan_round(state, Resources(0.0, 0.0))
    assert alone.admitted == [] and alone.reasons["a1"].startswith("pool too small")


def test_a_live_node_with_room_means_no_wait() -> None:
    decided = pool.plan_round(_state(_queued("a1", 1, 1)), Resources(8.0, 1.0), Autoscaler((GPU_NODE,)))
    assert decided.admitted == ["a1"] and decided.waits == {}


def test_a_trial_no_node_type_holds_waits_with_the_reason_and_holds_back_nothing() -> None:
    state = _state(_queued("big", 1, 1, gpus=2), _queued("small", 2, 2))
    decided = pool.plan_round(state, Resources(0.0, 0.0), Autoscaler((GPU_NODE,)))
    assert decided.admitted == ["small"]
    assert decided.reasons["big"] == (
        "pool too small: no node can hold a trial of 2 GPUs, 1 CPU: the live pool has 0 GPUs, 0 CPUs, and the "
        "autoscaler's largest node types have 1 GPU, 8 CPUs"
    )


def test_the_node_types_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SMARTUNE_AUTOSCALER", "1")
    monkeypatch.setenv(NODE_TYPES_ENV, '[{"cpus": 8, "gpus": 1, "max_workers": 4}]')
    assert Settings().autoscaled_node_types == (NodeType(cpus=8, gpus=1, max_workers=4),)
    monkeypatch.setenv("SMARTUNE_AUTOSCALER", "0")
    assert Settings().autoscaled_node_types == ()  # declared but off: judged by the live pool alone
    monkeypatch.setenv("SMARTUNE_AUTOSCALER", "1")
    monkeypatch.setenv(NODE_TYPES_ENV, "")
    with pytest.raises(ValidationError, match="SMARTUNE_AUTOSCALER=1 needs SMARTUNE_AUTOSCALER_NODE_TYPES"):
        Settings()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ('{"cpus": 8}', "expected a JSON list"),
        ('[{"cpus": 8, "gpus": 1}]', r"\[0\]\.max_workers: Field required"),
        ('[{"cpus": 8, "max_workers": 1}, {"cpus": -1, "max_workers": 1}]', r"\[1\]\.cpus: Input should be"),
        ('[{"cpus": 8, "max_workers": 1, "gpu": 1}]', r"\[0\]\.gpu: Extra inputs"),
    ],
)
def test_a_malformed_node_type_is_named(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_node_types(text)


def test_a_gpu_job_on_an_empty_pool_is_accepted_dispatched_and_told_to_wait(
    client: TestClient, db: Database, engine: Engine, fake_ray: FakeRay, settings: Settings
) -> None:
    key = make_team(db, "bravo", gpu_quota=2)
    job_id = submit(client, key, spec(resources={"gpus": 1}))["id"]  # 201: a node type holds its trial
    engine.tick()
    job = _job(client, key, job_id)
    assert job["state"] == "DISPATCHED", job
    assert "waiting for the autoscaler to add a node with 1 GPU, 1 CPU" in job["transitions"][-1]["reason"]
    env = fake_ray.jobs[f"{job_id}-a1"].env_vars
    assert env["SMARTUNE_WAIT_FOR_RESOURCES"] == "1"  # the driver waits instead of refusing
    assert parse_node_types(env[NODE_TYPES_ENV]) == (GPU_NODE,)  # and knows which nodes may come
    assert env["SMARTUNE_UNPLACEABLE_TIMEOUT_S"] == "900"  # the guard stays on for what no node type holds
    both = spec(resources={"gpus": 1}, limits={"max_concurrent_trials": 2})
    estimate = client.post("/api/v1/jobs", params={"dry_run": "true"}, json=both, headers=auth(key)).json()
    assert estimate["concurrency"]["pool"] == {"gpus": 2.0, "cpus": 16.0}  # the reach, not the empty pool
    assert estimate["concurrency"]["running"] == 2  # both trials at once: two nodes may come


def test_without_the_autoscaler_the_driver_is_not_told_to_wait(settings: Settings) -> None:
    class _Team:
        name = "bravo"
        data_roots: list[str] = []

    class _Job:
        id, kind, spec_json, spec_hash, team, estimate = "j1", "sweep", "{}", "h", _Team(), None

    plain = settings.model_copy(update={"autoscaler": False})
    _entry, env, _meta = submission(_Job(), 1, plain)  # type: ignore[arg-type]
    assert "SMARTUNE_WAIT_FOR_RESOURCES" not in env and NODE_TYPES_ENV not in env


def test_a_trial_no_node_type_holds_is_refused_naming_the_field(client: TestClient, db: Database) -> None:
    key = make_team(db, "bravo", gpu_quota=4)
    refused = client.post("/api/v1/jobs", json=spec(resources={"gpus": 2}), headers=auth(key))
    assert refused.status_code == 422 and refused.json()["field"] == "resources.gpus", refused.text
    assert "no node type the autoscaler may add holds the trial" in refused.json()["detail"]
    assert "the largest have 1 GPU, 8 CPUs" in refused.json()["detail"]


def test_before_the_pool_is_read_a_node_type_decides_without_a_503(
    client: TestClient, db: Database, fake_ray: FakeRay
) -> None:
    key = make_team(db, "bravo", gpu_quota=4)
    fake_ray.down = True  # a fresh head that lists no node yet
    assert submit(client, key, spec(resources={"gpus": 1}))["state"] == "QUEUED"
    waiting = client.post("/api/v1/jobs", json=spec(resources={"gpus": 2}, seeds=[2]), headers=auth(key))
    assert waiting.status_code == 503 and waiting.json()["field"] == "resources.gpus"  # as without one


def test_a_team_at_its_quota_waits_while_another_team_scales_the_pool_up(
    client: TestClient, db: Database, engine: Engine, fake_ray: FakeRay
) -> None:
    alpha = make_team(db, "alpha", gpu_quota=1)
    bravo = make_team(db, "bravo", gpu_quota=1)
    one_trial = {"axes": {"learning_rate": {"type": "grid", "values": [1e-4]}}}
    gpu = {"resources": {"gpus": 1}, "search_space": one_trial}
    a1 = submit(client, alpha, spec(**gpu))["id"]
    a2 = submit(client, alpha, spec(**gpu, seeds=[2]))["id"]
    b1 = submit(client, bravo, spec(**gpu))["id"]
    engine.tick()
    assert [_job(client, k, j)["state"] for k, j in ((alpha, a1), (alpha, a2), (bravo, b1))] == [
        "DISPATCHED", "QUEUED", "DISPATCHED"]  # fmt: skip
    assert _job(client, alpha, a2)["wait_reason"] == "team quota: 1/1 GPUs in use, needs 1 GPU at its peak"
    assert fake_ray.submissions == [f"{a1}-a1", f"{b1}-a1"]
    queue = client.get("/api/v1/pool/queue", headers=auth(alpha)).json()["data"]
    assert [e["reason"] for e in queue] == ["team quota: 1/1 GPUs in use, needs 1 GPU at its peak"]
