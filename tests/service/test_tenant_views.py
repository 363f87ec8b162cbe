"""What a team's key sees of the server (service.api.redact, service.api.views, the pool routes): results
without the tracking URI or server paths, error texts without log tails or paths (admins see them whole),
and the other teams of the pool only as totals."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient

from service.api.redact import public_summary, scrub, tenant_logs, tenant_text
from service.engine.rounds import Engine
from service.store.db import Database
from tests.service.fakes import FakeRay, FakeTracker, summary_for
from tests.service.utils import auth, make_team, spec, submit

SECRET_URI = "postgresql://mlflow:hunter2@db.internal:5432/mlflow"
SERVER_PATH = "/srv/smartune/data/ray_results/nlp"
RAY_FAILURE = (
    "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\n"
    f'  File "{SERVER_PATH}/driver.py", line 3\nRuntimeError: token in ~/.ray/auth_token\n'
)


def _succeeded(
    client: TestClient, key: str, engine: Engine, ray: FakeRay, tracker: FakeTracker, summary: dict[str, Any]
) -> str:
    job_id: str = submit(client, key)["id"]
    engine.tick()
    for trial in ("t1", "t2"):
        tracker.log_trial(job_id, trial, "TERMINATED", 0.7, epoch=1)
    tracker.summaries[job_id] = summary
    ray.set(f"{job_id}-a1", "SUCCEEDED", logs="done\n")
    engine.tick()
    assert client.get(f"/api/v1/jobs/{job_id}", headers=auth(key)).json()["state"] == "SUCCEEDED"
    return job_id


def test_results_show_no_tracking_uri_and_no_server_paths(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:
    job_id = "job-placeholder"
    summary = summary_for(job_id)
    summary["tracking_uri"] = SECRET_URI
    summary["storage_path"] = SERVER_PATH  # a field the contract may add later: private until listed
    summary["best"]["checkpoint_uri"] = f"file://{SERVER_PATH}/checkpoint_000001"
    summary["best"]["params"] = {"learning_rate": 1e-4, "model": f"{SERVER_PATH}/models/bert"}
    summary["cells"][0]["checkpoint"] = f"{SERVER_PATH}/c0"
    job_id = _succeeded(client, team_key, engine, fake_ray, fake_tracker, summary)
    results = client.get(f"/api/v1/jobs/{job_id}/results", headers=auth(team_key))
    assert results.status_code == 200
    body = results.json()
    text = json.dumps(body)
    assert "tracking_uri" not in body and "storage_path" not in body
    assert "hunter2" not in text and "/srv" not in text and "checkpoint" not in text
    assert body["best"] == {
        "params": {"learning_rate": 1e-4, "model": "<path>"},
        "value": 0.75,
        "run_id": "run-t1",
    }
    assert body["cells"][0]["mean"] == 0.75 and body["cells"][0]["trial_ids"] == ["t1", "t2"]
    assert body["main_metric"] == "accuracy" and body["parent_run_id"] == "parent-job-placeholder"


def test_a_failed_jobs_texts_are_cleaned_for_the_team_and_whole_for_admins(
    client: TestClient, team_key: str, admin_key: str, engine: Engine, fake_ray: FakeRay
) -> None:
    job_id = submit(client, team_key)["id"]
    engine.tick()
    fake_ray.set(f"{job_id}-a1", "FAILED", logs=f"reading {SERVER_PATH}/train.tsv\n", message=RAY_FAILURE)
    engine.tick()
    mine = client.get(f"/api/v1/jobs/{job_id}", headers=auth(team_key)).json()
    assert mine["state"] == "FAILED"
    assert mine["message"] == "Job entrypoint command failed with exit code 1"
    assert mine["attempts"][0]["message"] == "Job entrypoint command failed with exit code 1"
    assert (
        mine["transitions"][-1]["reason"] == "Ray job FAILED: Job entrypoint command failed with exit code 1"
    )
    listed = client.get("/api/v1/jobs", headers=auth(team_key)).json()["data"][0]
    assert listed["message"] == mine["message"]
    for text in (json.dumps(mine), json.dumps(listed)):
        assert "/srv" not in text and "auth_token" not in text and "train.tsv" not in text
        assert "last lines" not in text and "Traceback" not in text
    admin = client.get(f"/api/v1/jobs/{job_id}", headers=auth(admin_key)).json()
    assert SERVER_PATH in admin["message"] and "train.tsv" in admin["message"]  # the driver's log tail
    assert admin["attempts"][0]["message"] == RAY_FAILURE
    admin_listed = client.get("/api/v1/jobs", headers=auth(admin_key)).json()["data"][0]
    assert admin_listed["message"] == admin["message"]


VENV = "/opt/smartune/.venv/lib/python3.11/site-packages/ray/tune/tune.py"
DRIVER_LOG = (
    "Connecting to existing Ray cluster at address: 10.20.30.40:6379...\n"
    f'  File "{VENV}", line 1035, in run\n'
    "(TrainableWrapper pid=4242, ip=10.20.30.40) epoch 1 done, version 1.2.3.4.5\n"
    "View detailed results here: " + SERVER_PATH + "/job-1\n"
    + json.dumps({"job_id": "job-1", "tracking_uri": "sqlite:////srv/smartune/data/mlflow.db",
                  "best": {"checkpoint_uri": SERVER_PATH + "/ckpt", "value": 0.5}})
    + "\n"
)  # fmt: skip


def test_a_teams_logs_are_scrubbed_like_its_error_texts_and_an_admins_are_whole(
    client: TestClient, team_key: str, admin_key: str, engine: Engine, fake_ray: FakeRay
) -> None:
    """The driver's summary line names the tracking URI and checkpoint paths, Ray's lines the node's
    address, a traceback the venv: a team's key reads them scrubbed, an admin's key as they are."""
    job_id = submit(client, team_key)["id"]
    engine.tick()
    fake_ray.set(f"{job_id}-a1", "RUNNING", logs=DRIVER_LOG)
    logs = client.get(f"/api/v1/jobs/{job_id}/logs", headers=auth(team_key)).text
    for secret in ("sqlite:", "/srv/", "/opt/", ".venv", "10.20.30.40", "mlflow.db"):
        assert secret not in logs
    lines = logs.splitlines()
    assert lines[0] == "Connecting to existing Ray cluster at address: <ip>:6379..."
    assert lines[1] == '  File "<path>", line 1035, in run'
    assert lines[2] == "(TrainableWrapper pid=4242, ip=<ip>) epoch 1 done, version 1.2.3.4.5"
    assert json.loads(lines[4]) == {"job_id": "job-1", "tracking_uri": "<uri>",
                                    "best": {"checkpoint_uri": "<path>", "value": 0.5}}  # fmt: skip
    assert logs.endswith("\n") and len(lines) == 5
    tail = client.get(f"/api/v1/jobs/{job_id}/logs", params={"tail": 2}, headers=auth(team_key)).text
    assert tail.splitlines() == lines[-2:]
    assert client.get(f"/api/v1/jobs/{job_id}/logs", headers=auth(admin_key)).text == DRIVER_LOG


def test_tenant_logs_keep_what_is_no_secret() -> None:
    text = 'epoch 2/3 lr 1e-4 loss 0.25 at 12:03:04.5 in ./rel/dir\r\n{not json}\n{"a": [1, "/x/y"]}'
    assert tenant_logs(text) == "epoch 2/3 lr 1e-4 loss 0.25 at 12:03:04.5 in ./rel/dir\r\n{not json}\n" + (
        '{"a": [1, "<path>"]}'
    )
    assert tenant_logs("") == ""
    assert scrub("node 192.168.1.7, not 256.1.1.1 nor v10.0.0.1") == "node <ip>, not 256.1.1.1 nor v10.0.0.1"
    coloured = "dashboard at \x1b[1m\x1b[32mhttp://u:pw@10.0.0.5:8265 \x1b[39m\x1b[22m"  # as Ray prints it
    assert scrub(coloured) == "dashboard at \x1b[1m\x1b[32m<uri> \x1b[39m\x1b[22m"


def test_tenant_text_keeps_the_reason_and_drops_tails_paths_and_uris() -> None:
    assert tenant_text(None) is None
    assert tenant_text("") == ""
    assert tenant_text("exit code 1\n--- last lines of the driver's log ---\n/srv/x") == "exit code 1"
    assert tenant_text(f"cannot open {SERVER_PATH}/a.tsv: denied") == "cannot open <path>: denied"
    assert tenant_text(f"tracking at {SECRET_URI} down") == "tracking at <uri> down"
    assert tenant_text("see ~/.ray/auth_token") == "see <path>"
    assert tenant_text("lr 1e-4 / 2 epochs, 3/4 done") == "lr 1e-4 / 2 epochs, 3/4 done"  # not paths
    assert len(tenant_text("x" * 2000) or "") == 503
    assert scrub("a/b and ./rel stay") == "a/b and ./rel stay"


def test_public_summary_keeps_only_the_listed_fields() -> None:
    summary = summary_for("job-1")
    summary["best"] = None
    summary["cells"] = "not a list"
    out = public_summary(summary)
    assert set(out) == {"job_id", "parent_run_id", "main_metric", "trials_by_state", "cells", "best"}
    assert out["best"] is None and out["cells"] == "not a list"
    assert public_summary({"tracking_uri": SECRET_URI}) == {}


def test_a_path_outside_the_roots_gets_one_answer_whether_it_exists_or_not(
    client: TestClient, team_key: str
) -> None:
    """No existence oracle: outside the roots nothing is looked at."""
    details = []
    for path in ("/etc/passwd", "/etc/no-such-file"):
        response = client.post("/api/v1/jobs", json=spec(data=path), headers=auth(team_key))
        assert response.status_code == 422 and response.json()["field"] == "data"
        details.append(response.json()["detail"].replace(path, "<p>"))
    assert details[0] == details[1]


def _pool_setup(client: TestClient, db: Database, engine: Engine, team_key: str, other_key: str) -> str:
    third = make_team(db, "speech", gpu_quota=2, cpu_quota=16)
    submit(client, other_key)
    submit(client, other_key, spec(name="second"))
    submit(client, third)
    engine.tick()  # dispatches what fits
    submit(client, other_key, spec(name="queued"))
    submit(client, team_key)
    return third


def test_pool_shows_a_team_its_own_usage_and_the_others_as_totals(
    client: TestClient, db: Database, engine: Engine, team_key: str, other_key: str, admin_key: str
) -> None:
    _pool_setup(client, db, engine, team_key, other_key)
    admin = client.get("/api/v1/pool", headers=auth(admin_key)).json()
    assert [t["team"] for t in admin["teams"]] == ["nlp", "speech", "vision"] and admin["others"] is None
    by_name = {t["team"]: t for t in admin["teams"]}
    others = [by_name["speech"], by_name["vision"]]
    assert sum(t["jobs_running"] for t in others) >= 2  # the setup really put other teams to work

    response = client.get("/api/v1/pool", headers=auth(team_key))
    mine = response.json()
    assert [t["team"] for t in mine["teams"]] == ["nlp"] and mine["teams"][0] == by_name["nlp"]
    assert mine["others"] == {
        "teams": 2,
        "gpus_in_use": sum(t["gpus_in_use"] for t in others),
        "jobs_running": sum(t["jobs_running"] for t in others),
        "jobs_queued": sum(t["jobs_queued"] for t in others),
    }
    assert mine["capacity"] == admin["capacity"] and mine["reserved"] == admin["reserved"]
    assert "vision" not in response.text and "speech" not in response.text


def test_the_queue_keeps_other_teams_places_without_their_names_ids_or_reasons(
    client: TestClient, db: Database, engine: Engine, team_key: str, other_key: str, admin_key: str
) -> None:
    _pool_setup(client, db, engine, team_key, other_key)
    admin = client.get("/api/v1/pool/queue", headers=auth(admin_key)).json()
    assert {e["team"] for e in admin["data"]} == {"nlp", "vision"} and admin["count"] == 2
    assert all(e["job_id"] and e["reason"] for e in admin["data"])

    response = client.get("/api/v1/pool/queue", headers=auth(team_key))
    mine = response.json()
    assert mine["count"] == admin["count"]
    for seen, full in zip(mine["data"], admin["data"], strict=True):
        assert seen["position"] == full["position"] and seen["cpus"] == full["cpus"]
        if full["team"] == "nlp":
            assert seen == full
        else:
            assert seen["job_id"] is None and seen["team"] is None and seen["reason"] is None
    assert "vision" not in response.text

    theirs = client.get("/api/v1/pool/queue", headers=auth(other_key)).json()
    assert [e["team"] for e in theirs["data"] if e["team"]] == ["vision"]


def test_why_trials_failed_is_shown_without_server_paths() -> None:
    error = {"trial_id": "t1", "run_id": "r1", "error_class": "data", "checkpoint": "/srv/ckpt"}
    summary = summary_for("job-1") | {
        "errors": [error | {"error": "DataError: /srv/nlp/train.tsv, row 6: bad"}]
    }
    out = public_summary(summary)["errors"]
    assert out == [
        {"trial_id": "t1", "run_id": "r1", "error_class": "data", "error": "DataError: <path>, row 6: bad"}
    ]


def test_the_registered_model_is_shown_without_run_ids_or_paths() -> None:
    summary = summary_for("job-1") | {
        "registered_model": {"name": "smartune-job-1", "alias": "best", "version": "2", "uri": "models:/smartune-job-1@best",
                             "model_uri": "models:/m-1", "run_id": "r1", "trial_id": "t1",
                             "error": "see /srv/smartune/ray_results/x"},
    }  # fmt: skip
    shown = public_summary(summary)["registered_model"]
    assert shown == {"name": "smartune-job-1", "alias": "best", "version": "2", "uri": "models:/smartune-job-1@best",
                     "error": "see <path>"}  # fmt: skip


def test_a_teams_model_version_shows_where_best_is_and_why() -> None:
    """The registry entry of worker.tune.registration, and one per task of a grid over tasks."""
    entry = {"name": "smartune-nlp-rte", "alias": "best", "version": "3", "uri": "models:/smartune-nlp-rte/3",
             "best_uri": "models:/smartune-nlp-rte@best", "best_version": "2", "alias_moved": False,
             "alias_note": "best stays at version 2: dev accuracy 0.6500 does not beat 0.7000", "dev_score": 0.65,
             "model_uri": "models:/m-1", "run_id": "r1", "trial_id": "t1"}  # fmt: skip
    shown = public_summary(
        summary_for("job-1") | {"registered_model": entry, "registered_models": {"rte": entry}}
    )
    public = {k: v for k, v in entry.items() if k not in ("model_uri", "run_id", "trial_id")}
    assert shown["registered_model"] == public and shown["registered_models"] == {"rte": public}
    assert public_summary(summary_for("job-1") | {"registered_models": "odd"})["registered_models"] == {}


def test_a_multitask_summary_shows_each_task_without_paths() -> None:
    """`tasks` (over the job) and `best.tasks` (the best trial's own) reach a tenant; nothing unlisted does."""
    registered = {"name": "smartune-job-1-rte", "alias": "best", "version": "1", "uri": "models:/smartune-job-1-rte@best",
                  "model_uri": "models:/m-1", "run_id": "r9", "error": None}  # fmt: skip
    summary = summary_for("job-1")
    summary["tasks"] = {
        "rte": {"value": 0.61, "stage": "finetune", "epoch": 2, "trial_id": "t1", "run_id": "r1", "seed": 1,
                "registered_model": registered, "checkpoint": f"{SERVER_PATH}/c"},
        "stsb": {"value": 0.8, "stage": "joint", "epoch": 3, "trial_id": "t2", "run_id": "r2", "seed": 2},
    }  # fmt: skip
    summary["best"]["tasks"] = {"rte": {"value": 0.6, "stage": "joint", "epoch": 1, "path": SERVER_PATH}}
    out = public_summary(summary)
    assert out["tasks"]["stsb"] == summary["tasks"]["stsb"]
    assert out["tasks"]["rte"]["registered_model"] == {
        "name": "smartune-job-1-rte", "alias": "best", "version": "1", "uri": "models:/smartune-job-1-rte@best",
        "error": None,
    }  # fmt: skip
    assert "checkpoint" not in out["tasks"]["rte"]
    assert out["best"]["tasks"] == {"rte": {"value": 0.6, "stage": "joint", "epoch": 1}}
    assert public_summary(summary_for("job-1") | {"tasks": "odd"})["tasks"] == {}
