"""Client mistakes: 422 naming the field, 413 for big bodies, data roots, limits; never a 500."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.store.db import Database
from tests.service.utils import auth, make_team, spec


def post(client: TestClient, key: str, body: Any) -> Any:
    return client.post("/api/v1/jobs", json=body, headers=auth(key))


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (spec(training={"epochs": 0}), "training.epochs"),
        (spec(task="glue-of-mars"), "task"),
        (spec(method="magic"), "method"),
        (spec(trainng={"epochs": 1}), "trainng"),
        (spec(resources={"gpus": 1.5}), "resources.gpus"),
        (
            spec(search_space={"axes": {"learning_rate": {"type": "uniform", "low": 1, "high": 0}}}),
            "search_space.axes.learning_rate",
        ),
        (spec(seeds=[]), "seeds"),
        ({"model": "tiny-random"}, "task"),
        # found by the contract's check of every grid cell, which names no field: located from the spec
        (spec(search_space={"axes": {"epochs": {"values": [1, 10**6]}}}), "search_space.axes.epochs"),
        (spec(search_space={"axes": {"adv_lr": {"values": [-1.0]}}}), "search_space.axes.adv_lr"),
        (spec(training={"weight_decay": "inf"}), "training.weight_decay"),
        # strict types, as the OpenAPI document declares them: no "0" for 0, no false for 0
        (spec(priority="0"), "priority"),
        (spec(limits={"max_retries": False}), "limits.max_retries"),
        (spec(seeds=["1"]), "seeds.0"),
    ],
)
def test_invalid_specs_name_the_field(client: TestClient, team_key: str, body: Any, field: str) -> None:
    response = post(client, team_key, body)
    assert response.status_code == 422, response.text
    error = response.json()
    assert error["field"] == field and error["detail"].startswith(field)
    assert error["errors"][0]["field"] == field


def test_deployment_limits(client: TestClient, team_key: str) -> None:
    too_many_seeds = post(client, team_key, spec(seeds=[1, 2, 3, 4, 5, 6]))
    assert too_many_seeds.status_code == 422 and too_many_seeds.json()["field"] == "seeds"
    grid = {"learning_rate": {"values": [1e-5, 2e-5, 3e-5, 5e-5]}, "batch_size": {"values": [8, 16, 32, 64]}}
    big = post(client, team_key, spec(search_space={"axes": grid}, seeds=[1, 2, 3, 4, 5, 6][:5]))
    assert big.status_code == 422 and big.json()["field"] == "search_space"
    assert "80 trials" in big.json()["detail"]


def test_data_and_model_paths_must_lie_under_a_data_root(
    client: TestClient, team_key: str, data_root: Path, tmp_path: Path
) -> None:
    assert post(client, team_key, spec(data=str(data_root / "rte"))).status_code == 201
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for body, field in [
        (spec(data=str(outside)), "data"),
        (spec(data="/etc"), "data"),
        (spec(data=str(data_root / ".." / "elsewhere")), "data"),
        (spec(data=str(data_root / "missing")), "data"),
        (spec(model=str(outside)), "model"),
        (spec(model="../../etc/passwd"), "model"),
        (spec(data="not a hub id!"), "data"),
        # A relative path would be read from the worker's working directory, outside every root.
        (spec(data="train.csv"), "data"),
        (spec(data="./glue"), "data"),
        (spec(data="data/glue/RTE"), "data"),
        (spec(model="./my-model"), "model"),
    ]:
        response = post(client, team_key, body)
        assert response.status_code == 422, body
        assert response.json()["field"] == field
    relative = post(client, team_key, spec(data="train.csv")).json()
    assert relative["field"] == "data" and "relative path" in relative["detail"]


def test_hub_ids_only_where_the_deployment_allows_them(
    client: TestClient, app: Any, settings: Any, team_key: str
) -> None:
    hub = post(client, team_key, spec(data="nyu-mll/glue")).json()  # the default: no hub downloads at all
    assert hub["field"] == "data" and "SMARTUNE_HUB_ALLOW" in hub["detail"]
    assert post(client, team_key, spec(model="org/any-model")).json()["field"] == "model"
    app.state.settings = settings.model_copy(update={"hub_allow": ["nyu-mll/*"]})
    assert post(client, team_key, spec(data="nyu-mll/glue")).status_code == 201
    assert post(client, team_key, spec(model="org/any-model")).status_code == 422  # not on the list
    assert post(client, team_key, spec(model="tiny-random")).status_code == 201  # aliases are local


def test_gpus_beyond_the_teams_quota_are_refused(client: TestClient, db: Database) -> None:
    key = make_team(db, "small", gpu_quota=1)
    per_trial = post(client, key, spec(resources={"gpus": 2}))
    assert per_trial.status_code == 422 and per_trial.json()["field"] == "resources.gpus"
    concurrent = post(client, key, spec(resources={"gpus": 1}, limits={"max_concurrent_trials": 2}))
    assert concurrent.status_code == 422 and concurrent.json()["field"] == "limits.max_concurrent_trials"
    assert post(client, key, spec(resources={"gpus": 1})).status_code == 201


def test_queued_jobs_per_team_are_capped(client: TestClient, team_key: str, settings: Any, app: Any) -> None:
    app.state.settings = settings.model_copy(update={"max_queued_jobs_per_team": 2})
    answers = [post(client, team_key, spec(seeds=[s])) for s in (1, 2, 3)]
    assert [a.status_code for a in answers] == [201, 201, 429]
    assert int(answers[2].headers["retry-after"]) >= 1  # a full queue says when to try again too


def test_oversized_bodies_get_413(client: TestClient, team_key: str) -> None:
    body = spec(name="x" * 100, columns={f"c{i}": "y" * 100 for i in range(1000)})
    response = post(client, team_key, body)
    assert response.status_code == 413
    assert response.json()["detail"] == "Content Too Large"
    chunked = client.post(
        "/api/v1/jobs",
        content=iter([b'{"task": "rte", "name": "', b"x" * 70_000, b'"}']),
        headers={**auth(team_key), "Content-Type": "application/json"},
    )
    assert chunked.status_code == 413


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"[]",
        b"null",
        b'"rte"',
        b"[" * 5000 + b"]" * 5000,
        b'{"task": "rte", "training": {"epochs": 1e309}}',
        b'{"task": "rte", "training": {"learning_rate": NaN}}',
        b'{"task": "rte", "seeds": [1e400]}',
        b'{"task": "rte", "priority": 99999999999999999999999}',
        b'{"task": "rte", "name": "\\ud800"}',
        b"\xff\xfe\x00",
        json.dumps(spec(method="smart", method_params={"lambda_s": "lots"})).encode(),
        json.dumps(spec(method="smart", method_params={"lambda_s": [1]})).encode(),
        json.dumps(spec(search_space={"preset": "nope"})).encode(),
        json.dumps(spec(task=["rte", 3])).encode(),
        json.dumps(spec(columns=["a"])).encode(),
    ],
)
def test_garbage_bodies_are_client_errors(client: TestClient, team_key: str, raw: bytes) -> None:
    response = client.post(
        "/api/v1/jobs", content=raw, headers={**auth(team_key), "Content-Type": "application/json"}
    )
    assert 400 <= response.status_code < 500, response.text
    assert "detail" in response.json()


@pytest.mark.parametrize(
    ("method", "path", "params"),
    [
        ("GET", "/api/v1/jobs", {"limit": "abc"}),
        ("GET", "/api/v1/jobs", {"limit": 0}),
        ("GET", "/api/v1/jobs", {"offset": -1}),
        ("GET", "/api/v1/jobs", {"offset": 10**30}),
        ("GET", "/api/v1/jobs/" + "x" * 5000, {}),
        ("GET", "/api/v1/jobs/%00", {}),
        ("GET", "/api/v1/jobs/job-1/logs", {"tail": -5}),
        ("DELETE", "/api/v1/jobs", {}),
        ("GET", "/api/v1/nowhere", {}),
    ],
)
def test_bad_requests_are_client_errors(
    client: TestClient, team_key: str, method: str, path: str, params: Any
) -> None:
    response = client.request(method, path, params=params, headers=auth(team_key))
    assert 400 <= response.status_code < 500, response.text
    assert set(response.json()) >= {"detail", "field"}


def test_idempotency_key_header_is_validated(client: TestClient, team_key: str) -> None:
    response = client.post(
        "/api/v1/jobs", json=spec(), headers={**auth(team_key), "Idempotency-Key": "k" * 300}
    )
    assert response.status_code == 422 and response.json()["field"] == "header.idempotency-key"


def test_what_could_never_run_is_refused_at_submission(
    client: TestClient, db: Database, app: Any, settings: Any
) -> None:
    key = make_team(db, "cpu-bound", gpu_quota=0, cpu_quota=4)
    cpus = post(client, key, spec(resources={"cpus": 8}))
    assert cpus.status_code == 422 and cpus.json()["field"] == "resources.cpus"
    peak = post(client, key, spec(resources={"cpus": 3}, limits={"max_concurrent_trials": 2}, seeds=[1, 2]))
    assert (
        peak.json()["field"] == "limits.max_concurrent_trials" and "quota of 4 CPUs" in peak.json()["detail"]
    )
    gpus = post(client, key, spec(resources={"gpus": 1}))  # a quota of 0 GPUs: no GPU job ever runs
    assert gpus.json()["field"] == "resources.gpus"
    budget = post(client, key, spec(limits={"time_budget_s": 10 * 86400}))
    assert budget.json()["field"] == "limits.time_budget_s"
    app.state.settings = settings.model_copy(update={"max_spec_bytes": 1024})
    big = post(client, key, spec(name="x" * 190, columns={f"c{i}": "y" * 40 for i in range(20)}))
    assert big.status_code == 413 and "environment variable" in big.json()["detail"]


def test_a_team_without_a_quota_gets_the_deployments(client: TestClient, db: Database) -> None:
    key = make_team(db, "default-quota")  # default_gpu_quota 1 in the test settings' defaults
    assert post(client, key, spec(resources={"gpus": 2})).json()["field"] == "resources.gpus"
    assert post(client, key, spec(resources={"gpus": 1})).status_code == 201


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/teams", {"name": "speech", "gpu_quota": "2"}, "gpu_quota"),
        ("/api/v1/teams", {"name": "speech", "max_concurrent_jobs": True}, "max_concurrent_jobs"),
        ("/api/v1/teams/nlp/keys", {"is_admin": 0}, "is_admin"),
    ],
)
def test_admin_bodies_hold_the_declared_types(
    client: TestClient, admin_key: str, team_key: str, path: str, body: Any, field: str
) -> None:
    response = client.post(path, json=body, headers=auth(admin_key))
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field
    patched = client.patch("/api/v1/teams/nlp", json={"weight": "2"}, headers=auth(admin_key))
    assert patched.status_code == 422 and patched.json()["field"] == "weight"
    assert client.patch("/api/v1/teams/nlp", json={"weight": 2}, headers=auth(admin_key)).status_code == 200
