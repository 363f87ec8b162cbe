"""The SDK (`smartune.Client`) against the app with fake Ray and MLflow, through FastAPI's TestClient."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

import smartune
from service.engine.rounds import Engine
from smartune.frames import TRIAL_COLUMNS
from tests.service.fakes import FakeRay, FakeTracker, summary_for
from tests.service.utils import QUICK_SPEC, spec


@pytest.fixture
def sdk(client: TestClient, team_key: str) -> smartune.Client:
    return smartune.Client(key=team_key, http=client)


def test_a_job_from_submission_to_its_trials_frame(
    sdk: smartune.Client, tmp_path: Path, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(QUICK_SPEC))
    job_id = sdk.submit(spec_file, idempotency_key="once")
    assert job_id.startswith("job-") and sdk.submit(spec_file, idempotency_key="once") == job_id
    assert sdk.submit_job(QUICK_SPEC, idempotency_key="once")["replayed"] is True
    assert sdk.job(job_id)["state"] == "QUEUED" and sdk.job(job_id)["spec"]["task"] == "rte"
    assert [j["id"] for j in sdk.jobs()] == [job_id] and sdk.jobs(state="running") == []
    assert sdk.logs(job_id) == ""

    seen: list[str] = []

    def advance(job: dict[str, Any]) -> None:
        """Each poll moves the fake cluster one step: dispatched, two trials running, done."""
        seen.append(job["state"])
        sid = f"{job_id}-a1"
        if job["state"] == "DISPATCHED":
            fake_ray.set(sid, "RUNNING")
            fake_tracker.log_trial(job_id, "t1", "RUNNING", 0.5, epoch=0, params={"learning_rate": 1e-4})
        elif job["state"] == "RUNNING":
            fake_tracker.log_trial(job_id, "t1", "TERMINATED", 0.7, epoch=1, params={"learning_rate": 1e-4})
            fake_tracker.log_trial(job_id, "t2", "TERMINATED", 0.6, epoch=1, params={"learning_rate": 5e-4})
            fake_tracker.summaries[job_id] = summary_for(job_id, 0.7)
            fake_ray.set(sid, "SUCCEEDED", logs="done\n")
        engine.tick()

    job = sdk.wait(job_id, poll_s=0, progress=advance)
    assert job["state"] == "SUCCEEDED" and seen == ["QUEUED", "DISPATCHED", "RUNNING", "SUCCEEDED"]
    assert sdk.results(job_id)["best"]["value"] == 0.7
    assert sdk.logs(job_id, tail=1) == "done"

    frame = sdk.trials_frame(job_id)
    assert frame.shape == (2, 1 + len(TRIAL_COLUMNS) + 1)  # learning_rate, the trial columns, metrics.score
    assert list(frame.columns) == ["learning_rate", *TRIAL_COLUMNS, "metrics.score"]
    assert frame.index.name == "trial_id" and list(frame.index) == ["t1", "t2"]
    assert frame.loc["t2", "learning_rate"] == 5e-4 and frame.loc["t1", "best_score"] == 0.7
    assert frame.loc["t1", "mlflow_run_id"] == f"run-{job_id}-t1" and frame.loc["t1", "last_epoch"] == 1

    other = sdk.submit(spec(seeds=[7]))
    assert sdk.cancel(other)["state"] == "CANCELLED"
    assert {j["id"] for j in sdk.jobs(state=["SUCCEEDED", "CANCELLED"])} == {job_id, other}
    assert [j["id"] for j in sdk.jobs(limit=1)] == [other]


def test_the_pool_the_queue_and_the_key(sdk: smartune.Client, engine: Engine) -> None:
    job_id = sdk.submit(QUICK_SPEC)
    assert [(e["position"], e["job_id"]) for e in sdk.queue()] == [(1, job_id)]
    engine.tick()
    pool = sdk.pool()
    assert pool["capacity"] == {"cpus": 8.0, "gpus": 2.0} and [t["team"] for t in pool["teams"]] == ["nlp"]
    assert sdk.whoami()["team"] == "nlp" and sdk.queue() == []


def test_refusals_are_typed_errors(sdk: smartune.Client, client: TestClient, admin_key: str) -> None:
    with pytest.raises(smartune.SmartuneError) as missing:
        sdk.job("job-nope")
    assert (missing.value.status, missing.value.detail) == (404, "job 'job-nope' not found")
    assert str(missing.value) == "404: job 'job-nope' not found"
    with pytest.raises(smartune.SmartuneError) as invalid:
        sdk.submit(spec(task="mars"))
    assert invalid.value.status == 422 and invalid.value.field == "task" and invalid.value.errors
    with pytest.raises(smartune.SmartuneError) as early:
        sdk.results(sdk.submit(QUICK_SPEC))
    assert early.value.status == 409
    with pytest.raises(smartune.SmartuneError) as forbidden:
        sdk.teams()
    assert forbidden.value.status == 403
    admin = smartune.Client(key=admin_key, http=client)
    assert [t["name"] for t in admin.teams()] == ["nlp"]
    assert [k["team"] for k in admin.team_keys("nlp")] == ["nlp"]
    with pytest.raises(smartune.SmartuneError, match="404: team 'no such' not found"):
        admin.team_keys("no such")
    with pytest.raises(smartune.SmartuneError, match=r"^404: job 'x\?tail=1#' not found"):
        admin.job("x?tail=1#")  # quoted: an id cannot add a query or a fragment
    with pytest.raises(smartune.SmartuneError) as unknown:
        smartune.Client(key="smt_000000000000_" + "x" * 43, http=client).jobs()
    assert unknown.value.status == 401


def test_a_spec_file_is_read_as_yaml_1_2_or_json(
    sdk: smartune.Client, tmp_path: Path, client: TestClient
) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec(training={"learning_rate": 3e-4})).replace("0.0003", "3e-4"))
    assert "3e-4" in path.read_text()
    job = sdk.job(sdk.submit(path))
    assert job["spec"]["training"]["learning_rate"] == 3e-4  # a number, as YAML 1.2 reads it
    as_json = tmp_path / "spec.json"
    as_json.write_text(json.dumps(spec(seeds=[3])))
    assert sdk.job(sdk.submit(str(as_json)))["spec"]["seeds"] == [3]
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        sdk.submit(broken)
    with pytest.raises(FileNotFoundError):
        sdk.submit(tmp_path / "missing.yaml")
