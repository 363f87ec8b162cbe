"""A team's registered models: read from a real local MLflow store (SQLite, in process), listed by
`GET /api/v1/models` for the caller's team only, through the SDK (`Client.models`) and `smartune models`;
and `smartune admin mlflow-login`, which prints a team's MLflow login."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mlflow import MlflowClient

import smartune
from cli import client_cmd
from cli.main import main
from service.engine.registered_models import TeamModel, team_models
from tests.service.fakes import FakeTracker
from tests.service.utils import auth
from worker.contract.model_registry import DEV_SCORE, MAIN_METRIC, TASK_TAG, TEAM_TAG
from worker.contract.tags import JOB

RTE = TeamModel("smartune-nlp-rte", "nlp", "rte", "3", "2", 0.722, "accuracy", "job-2")
STSB = TeamModel("smartune-nlp-stsb", "nlp", "stsb", "1", None, None, None, None)
VISION = TeamModel("smartune-vision-rte", "vision", "rte", "1", "1", 0.6, "accuracy", "job-9")


def _model(
    client: MlflowClient, name: str, tags: dict[str, str], versions: list[dict[str, str]], tmp: Path
) -> None:
    client.create_registered_model(name, tags)
    for tags_of_version in versions:
        client.create_model_version(name, tmp.as_uri(), tags=tags_of_version)


def test_a_teams_models_are_read_with_their_latest_and_best_versions(mlflow_uri: str, tmp_path: Path) -> None:
    client = MlflowClient(mlflow_uri)
    scored = [{JOB: f"job-{i}", DEV_SCORE: str(0.6 + i / 100), MAIN_METRIC: "accuracy"} for i in (1, 2, 3)]
    _model(client, "smartune-nlp-rte", {TEAM_TAG: "nlp", TASK_TAG: "rte"}, scored, tmp_path)
    client.set_registered_model_alias("smartune-nlp-rte", "best", "2")
    _model(client, "smartune-nlp-stsb", {TEAM_TAG: "nlp", TASK_TAG: "stsb"}, [{JOB: "job-4"}], tmp_path)
    # Not nlp's: team `nlp-x`'s model of rte; an untagged model under nlp's prefix; team n_p's (LIKE's `_`).
    _model(client, "smartune-nlp-x-rte", {TEAM_TAG: "nlp-x", TASK_TAG: "rte"}, [], tmp_path)
    _model(client, "smartune-nlp-mine", {}, [], tmp_path)
    _model(client, "smartune-n_p-rte", {TEAM_TAG: "n_p", TASK_TAG: "rte"}, [], tmp_path)
    _model(client, "smartune-nxp-rte", {TEAM_TAG: "n_p", TASK_TAG: "rte"}, [], tmp_path)  # a forged tag

    assert team_models(client, "nlp") == [
        TeamModel("smartune-nlp-rte", "nlp", "rte", "3", "2", pytest.approx(0.62), "accuracy", "job-2"),  # type: ignore[arg-type]
        TeamModel("smartune-nlp-stsb", "nlp", "stsb", "1", None, None, None, None),
    ]
    assert [m.name for m in team_models(client, "nlp-x")] == ["smartune-nlp-x-rte"]
    assert [m.name for m in team_models(client, "n_p")] == ["smartune-n_p-rte"]
    assert team_models(client, "vision") == []


def test_the_route_lists_the_callers_team_only(
    client: TestClient, fake_tracker: FakeTracker, team_key: str, other_key: str, admin_key: str
) -> None:
    fake_tracker.registered = {"nlp": [RTE, STSB], "vision": [VISION]}
    answer = client.get("/api/v1/models", headers=auth(team_key))
    assert answer.status_code == 200
    body = answer.json()
    assert body["count"] == 2 and [m["name"] for m in body["data"]] == [
        "smartune-nlp-rte",
        "smartune-nlp-stsb",
    ]
    assert body["data"][0] == {"name": "smartune-nlp-rte", "team": "nlp", "task": "rte", "latest_version": "3",
                               "best_version": "2", "best_score": 0.722, "metric": "accuracy", "best_job_id": "job-2",
                               "mlflow_url": "http://mlflow.test/#/models/smartune-nlp-rte"}  # fmt: skip
    assert client.get("/api/v1/models", headers=auth(team_key), params={"team": "nlp"}).json()["count"] == 2
    refused = client.get("/api/v1/models", headers=auth(team_key), params={"team": "vision"})
    assert refused.status_code == 404 and refused.json()["detail"] == "team 'vision' not found"
    mine = client.get("/api/v1/models", headers=auth(other_key)).json()
    assert [m["name"] for m in mine["data"]] == ["smartune-vision-rte"]
    # An admin names a team, or lists every team's.
    theirs = client.get("/api/v1/models", headers=auth(admin_key), params={"team": "vision"}).json()
    assert [m["name"] for m in theirs["data"]] == ["smartune-vision-rte"]
    every = client.get("/api/v1/models", headers=auth(admin_key)).json()
    assert [m["name"] for m in every["data"]] == [
        "smartune-nlp-rte",
        "smartune-nlp-stsb",
        "smartune-vision-rte",
    ]
    assert client.get("/api/v1/models", headers=auth(admin_key), params={"team": "nope"}).status_code == 404
    bad = client.get("/api/v1/models", headers=auth(admin_key), params={"team": "Bad Name"})
    assert bad.status_code == 422 and bad.json()["field"] == "query.team"
    fake_tracker.down = True
    down = client.get("/api/v1/models", headers=auth(team_key))
    assert down.status_code == 503 and "Retry-After" in down.headers
    assert down.json()["detail"] == "MLflow could not list the registered models now; try again later"


def test_the_sdk_and_the_cli_list_them(
    client: TestClient, fake_tracker: FakeTracker, team_key: str, monkeypatch: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    fake_tracker.registered = {"nlp": [RTE, STSB]}
    monkeypatch.setattr(client_cmd, "connect", lambda _args: smartune.Client(key=team_key, http=client))
    with smartune.Client(key=team_key, http=client) as sdk:
        assert [(m["name"], m["best_version"]) for m in sdk.models()] == [("smartune-nlp-rte", "2"),
                                                                          ("smartune-nlp-stsb", None)]  # fmt: skip
    assert main(["models"]) == 0
    header, rte, stsb = capsys.readouterr().out.splitlines()
    assert header.split() == ["NAME", "TASK", "LATEST", "BEST", "SCORE", "METRIC", "JOB"]
    assert rte.split() == ["smartune-nlp-rte", "rte", "3", "2", "0.7220", "accuracy", "job-2"]
    assert stsb.split() == ["smartune-nlp-stsb", "stsb", "1", "-", "-", "-", "-"]
    assert main(["models", "--json"]) == 0
    assert [m["task"] for m in json.loads(capsys.readouterr().out)] == ["rte", "stsb"]
    fake_tracker.registered = {}
    assert main(["models"]) == 0
    assert capsys.readouterr().out == "no registered models\n"


def test_the_admin_prints_a_teams_mlflow_login(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path / "data")
    assert main(["admin", "--data-dir", data, "create-team", "nlp", "--no-key"]) == 0
    assert main(["admin", "--data-dir", data, "mlflow-login", "nlp"]) == 2  # no secret: no users per team
    assert "SMARTUNE_MLFLOW_TEAM_SECRET is unset" in capsys.readouterr().err
    secret = "s" * 40
    monkeypatch.setenv("SMARTUNE_MLFLOW_TEAM_SECRET", secret)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "admin-password-1234")
    assert main(["admin", "--data-dir", data, "mlflow-login", "nlp"]) == 0
    password = hmac.new(secret.encode(), b"nlp", hashlib.sha256).hexdigest()
    assert (
        capsys.readouterr().out
        == f"MLFLOW_TRACKING_USERNAME=smartune-team-nlp\nMLFLOW_TRACKING_PASSWORD={password}\n"
    )
    assert main(["admin", "--data-dir", data, "mlflow-login", "nope"]) == 2
    assert "no team 'nope'" in capsys.readouterr().err
