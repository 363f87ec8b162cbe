"""What the engine keeps promising when one job, Ray or MLflow misbehaves (fake Ray and MLflow)."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from service.config import Settings
from service.engine.ray_jobs import RayUnavailable
from service.engine.rounds import Engine
from service.engine.tracking import TrialRun
from service.store.db import Database, utcnow
from service.store.models import Job
from tests.service.fakes import FakeRay, FakeTracker, summary_for
from tests.service.utils import auth, make_team, spec, submit


def read(client: TestClient, key: str, job_id: str) -> dict[str, Any]:
    return dict(client.get(f"/api/v1/jobs/{job_id}", headers=auth(key)).json())


def test_one_odd_job_stalls_no_other_job_and_no_scheduling(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay
) -> None:
    odd, fine = submit(client, team_key)["id"], submit(client, team_key)["id"]
    engine.tick()
    fake_ray.odd.add(f"{odd}-a1")  # every answer about this job raises something unexpected
    fake_ray.set(f"{fine}-a1", "RUNNING")
    late = submit(client, team_key)["id"]
    engine.tick()
    assert read(client, team_key, fine)["state"] == "RUNNING"  # watched despite the odd one
    assert read(client, team_key, late)["state"] == "DISPATCHED"  # and the round went on to schedule
    assert read(client, team_key, odd)["state"] == "DISPATCHED"  # the odd one waits for a sane answer


def test_a_sweep_with_no_completed_trial_fails_with_the_reason(
    client: TestClient, team_key: str, admin_key: str, engine: Engine, fake_ray: FakeRay,
    fake_tracker: FakeTracker,
) -> None:  # fmt: skip
    job_id = submit(client, team_key)["id"]
    engine.tick()
    error = {"error_class": "data", "error": "DataError: /srv/nlp/RTE/train.tsv, row 6: not UTF-8 text"}
    summary = summary_for(job_id) | {
        "trials_by_state": {"TERMINATED": 0, "ERROR": 2},
        "best": None,
        "errors": [{"trial_id": f"t{n}", "run_id": f"r{n}", **error} for n in (1, 2)],
    }
    fake_tracker.summaries[job_id] = summary
    fake_ray.set(f"{job_id}-a1", "SUCCEEDED")  # the driver ran to its end
    engine.tick()
    job = read(client, admin_key, job_id)
    assert job["state"] == "FAILED" and job["message"] == (
        "no trial completed (2 ERROR); failed trials: 2 x data: "
        "DataError: /srv/nlp/RTE/train.tsv, row 6: not UTF-8 text"
    )
    seen_by_team = read(client, team_key, job_id)["message"]  # the reason, without the server's paths
    assert "2 x data: DataError: <path>, row 6: not UTF-8 text" in seen_by_team and "/srv" not in seen_by_team


def test_a_driver_that_ended_well_without_any_summary_fails_the_job(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:
    job_id = submit(client, team_key)["id"]
    engine.tick()
    fake_ray.set(f"{job_id}-a1", "SUCCEEDED", logs="nothing like a summary\n")  # MLflow has none either
    engine.tick()
    job = read(client, team_key, job_id)
    assert job["state"] == "FAILED" and "without a summary" in job["message"]
    assert client.get(f"/api/v1/jobs/{job_id}/results", headers=auth(team_key)).status_code == 409


def test_a_summary_mlflow_could_not_give_is_fetched_again_later(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:
    job_id = submit(client, team_key)["id"]
    engine.tick()
    fake_tracker.down = True
    fake_ray.set(f"{job_id}-a1", "SUCCEEDED")  # no summary line in its log either
    engine.tick()
    job = read(client, team_key, job_id)
    assert job["state"] == "SUCCEEDED" and job["best_value"] is None
    fake_tracker.down = False
    fake_tracker.summaries[job_id] = summary_for(job_id, value=0.8)
    fake_tracker.log_trial(job_id, "t1", "TERMINATED", 0.8)
    engine.tick()
    job = read(client, team_key, job_id)
    assert job["best_value"] == 0.8 and [t["trial_id"] for t in job["trials"]] == ["t1"]
    results = client.get(f"/api/v1/jobs/{job_id}/results", headers=auth(team_key)).json()
    assert results["best"]["value"] == 0.8


def test_a_hung_tracking_server_times_out_and_the_round_goes_on(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker, app: Any,
    settings: Settings,
) -> None:  # fmt: skip
    engine.settings = engine.watcher.settings = settings.model_copy(update={"mlflow_timeout_s": 0.2})
    job_id = submit(client, team_key)["id"]
    engine.tick()
    fake_ray.set(f"{job_id}-a1", "RUNNING")
    fake_tracker.hang_s = 2.0
    late = submit(client, team_key)["id"]
    started = time.monotonic()
    engine.tick()
    assert time.monotonic() - started < 1.5  # not the 2 s the tracking server hangs for
    assert read(client, team_key, late)["state"] == "DISPATCHED"
    fake_tracker.hang_s = 0.0


def test_a_job_past_the_deployments_wall_time_is_stopped(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, db: Database, settings: Settings
) -> None:
    job_id = submit(client, team_key)["id"]
    engine.tick()
    fake_ray.set(f"{job_id}-a1", "RUNNING")
    engine.tick()
    past = utcnow() - timedelta(seconds=settings.max_job_wall_time_s + 60)
    with db.write_sessions() as session, session.begin():
        session.execute(update(Job).where(Job.id == job_id).values(started_at=past))
    engine.tick()
    job = read(client, team_key, job_id)
    assert job["state"] == "FAILED" and "maximum wall time" in job["message"]
    assert fake_ray.jobs[f"{job_id}-a1"].status == "STOPPED"


def test_a_lost_attempt_is_stopped_before_the_next_one(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay
) -> None:
    job_id = submit(client, team_key)["id"]
    engine.tick()
    fake_ray.restart()
    engine.tick()
    assert fake_ray.stop_calls == [f"{job_id}-a1"] and fake_ray.submissions[-1] == f"{job_id}-a2"


def test_each_team_has_its_own_experiment_storage_and_roots_and_no_hub(
    client: TestClient, db: Database, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker,
    settings: Settings,
) -> None:  # fmt: skip
    key = make_team(db, "speech", data_roots=["/srv/speech"])
    job_id = submit(client, key)["id"]
    engine.tick()
    env = fake_ray.jobs[f"{job_id}-a1"].env_vars
    assert env["SMARTUNE_MLFLOW_EXPERIMENT"] == "smartune-speech"
    assert env["SMARTUNE_STORAGE_PATH"].endswith("/ray_results/speech")
    roots = env["SMARTUNE_DATA_ROOTS"].split(os.pathsep)
    assert "/srv/speech" in roots and str(settings.data_dir) not in roots
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["SMARTUNE_DATASET_STORE"] == settings.dataset_store_uri  # trials fetch uploads from here
    assert env["SMARTUNE_UNPLACEABLE_TIMEOUT_S"] == "900"  # how long a sweep waits for a lost node
    fake_ray.set(f"{job_id}-a1", "RUNNING")
    fake_tracker.trials[job_id] = [TrialRun("t1", "r1", 1, "RUNNING")]
    engine.tick()
    assert "smartune-speech" in fake_tracker.experiments  # trials are read from the team's experiment


def test_only_the_lease_holder_schedules(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker, db: Database,
    settings: Settings,
) -> None:  # fmt: skip
    replica = Engine(db=db, ray=fake_ray, tracker=fake_tracker, settings=settings)
    engine.tick()  # the first engine takes the lease
    job_id = submit(client, team_key)["id"]
    replica.tick()
    assert not replica.leading and "standing by" in (replica.last_error or "")
    assert read(client, team_key, job_id)["state"] == "QUEUED"  # the standby replica admitted nothing
    engine.stop()  # a clean shutdown gives the lease up
    replica.tick()
    assert replica.leading and read(client, team_key, job_id)["state"] == "DISPATCHED"
    assert fake_ray.submissions == [f"{job_id}-a1"]


def test_an_unfittable_job_is_refused_and_a_shrunk_pool_blocks_nothing(
    client: TestClient, db: Database, engine: Engine, fake_ray: FakeRay
) -> None:
    key = make_team(db, "big", gpu_quota=8)
    engine.tick()  # the engine knows the pool: 2 GPUs
    too_big = client.post("/api/v1/jobs", json=spec(resources={"gpus": 4}), headers=auth(key))
    assert too_big.status_code == 422 and too_big.json()["field"] == "resources.gpus"
    assert "the pool of 2" in too_big.json()["detail"]
    ok = submit(client, key, spec(resources={"gpus": 2}))["id"]
    fake_ray.gpus = 1  # a node left: the accepted job cannot run now
    small = submit(client, key, spec(resources={"gpus": 1}, seeds=[2]))["id"]
    engine.tick()
    assert read(client, key, ok)["wait_reason"].startswith("pool too small")
    assert read(client, key, small)["state"] == "DISPATCHED"  # it does not wait behind the big one


def test_an_unreadable_capacity_keeps_the_last_one_and_the_round_goes_on(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    job_id = submit(client, team_key)["id"]
    engine.tick()
    known = engine.capacity

    def unreadable() -> None:
        raise RayUnavailable("the state API timed out")

    monkeypatch.setattr(fake_ray, "capacity", unreadable)
    fake_tracker.summaries[job_id] = summary_for(job_id)
    fake_ray.set(f"{job_id}-a1", "SUCCEEDED")
    engine.tick()  # the job is still watched: it ends although the capacity could not be read
    assert read(client, team_key, job_id)["state"] == "SUCCEEDED"
    assert engine.capacity == known and engine.last_error and "the last known is used" in engine.last_error
