"""The engine over fake Ray: dispatch once, reconcile after restarts, requeue lost jobs, quotas, Ray down."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from service.config import Settings
from service.engine import planned_stop
from service.engine.ray_jobs import RayJobError
from service.engine.rounds import Engine
from service.main import create_app
from service.store.db import Database
from service.store.models import Transition
from tests.service.fakes import FakeRay, FakeTracker, summary_line
from tests.service.utils import auth, make_team, spec, submit


def read(client: TestClient, key: str, job_id: str) -> dict[str, Any]:
    return dict(client.get(f"/api/v1/jobs/{job_id}", headers=auth(key)).json())


def states(db: Database, job_id: str) -> list[str]:
    with db.sessions() as session:
        query = select(Transition.to_state).where(Transition.job_id == job_id).order_by(Transition.id)
        return list(session.scalars(query))


def test_a_lost_job_is_requeued_as_its_next_attempt(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, db: Database
) -> None:
    job_id = submit(client, team_key)["id"]
    engine.tick()
    fake_ray.set(f"{job_id}-a1", "RUNNING")
    engine.tick()
    queued_at = read(client, team_key, job_id)["queued_at"]
    fake_ray.restart()  # the head restarted: Ray forgot every job
    engine.tick()
    job = read(client, team_key, job_id)
    assert job["state"] == "DISPATCHED" and job["attempt"] == 2 and job["submission_id"] == f"{job_id}-a2"
    assert job["queued_at"] == queued_at  # it keeps its place in the queue
    assert [a["state"] for a in job["attempts"]] == ["LOST", "SUBMITTED"]
    assert states(db, job_id) == ["QUEUED", "DISPATCHED", "RUNNING", "LOST", "QUEUED", "DISPATCHED"]
    assert "resuming from" in job["transitions"][4]["reason"]
    assert fake_ray.submissions == [f"{job_id}-a1", f"{job_id}-a2"]
    assert fake_ray.jobs[f"{job_id}-a2"].entrypoint.endswith("--attempt 2")


def test_a_lost_job_waits_for_the_nodes_that_rejoin_after_its_heads_restart(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay
) -> None:
    """The pool is read again after a loss: the capacity cached from before the head's restart would
    dispatch the retry to a head whose worker nodes have not rejoined, and its driver would find none."""
    engine.settings = engine.settings.model_copy(update={"capacity_ttl_s": 3600})  # read once, then kept
    job_id = submit(client, team_key)["id"]
    engine.tick()
    fake_ray.set(f"{job_id}-a1", "RUNNING")
    engine.tick()
    fake_ray.restart()
    fake_ray.cpus, fake_ray.gpus = 0.0, 0.0  # the head alone (it runs no trials): its workers still restart
    engine.tick()
    job = read(client, team_key, job_id)
    assert job["state"] == "QUEUED" and job["attempt"] == 1, job
    assert "pool too small" in job["wait_reason"], job["wait_reason"]
    fake_ray.cpus, fake_ray.gpus = 8.0, 2.0  # the workers are back
    engine.refresh_capacity(force=True)
    engine.tick()
    job = read(client, team_key, job_id)
    assert job["state"] == "DISPATCHED" and job["submission_id"] == f"{job_id}-a2"


def test_a_job_lost_too_often_fails(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, settings: Settings
) -> None:
    job_id = submit(client, team_key)["id"]
    for _ in range(settings.max_attempts):
        engine.tick()
        fake_ray.restart()
    engine.tick()
    job = read(client, team_key, job_id)
    assert job["state"] == "FAILED" and job["message"] == f"lost {settings.max_attempts} times; giving up"


def test_planned_stops_requeue_without_counting_as_losses(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, settings: Settings, db: Database
) -> None:
    """`smartune serve` stopping its Ray head (or `smartune stop` after a crash) is no loss: more planned
    stops than `max_attempts`, then one real loss, and the job is still requeued."""
    job_id = submit(client, team_key)["id"]
    engine.tick()
    for number in range(1, settings.max_attempts + 2):
        fake_ray.set(f"{job_id}-a{number}", "RUNNING")
        engine.tick()
        engine.stop()  # the service stops...
        fake_ray.restart()  # ...with its Ray head...
        assert planned_stop.requeue_active(db) == [job_id]  # ...and records why
        assert planned_stop.requeue_active(db) == []  # once
        engine = Engine(db=db, ray=fake_ray, tracker=engine.tracker, settings=settings)  # the next start
        engine.tick()  # dispatches it as the next attempt
    fake_ray.restart()  # a real loss
    engine.tick()
    job = read(client, team_key, job_id)
    stops = settings.max_attempts + 1
    assert job["state"] == "DISPATCHED" and job["attempt"] == stops + 2
    assert [a["state"] for a in job["attempts"]] == ["STOPPED"] * stops + ["LOST", "SUBMITTED"]
    assert "planned stop" in job["attempts"][0]["message"]
    assert states(db, job_id)[:5] == ["QUEUED", "DISPATCHED", "RUNNING", "QUEUED", "DISPATCHED"]


def test_restart_keeps_watching_and_records_the_end_once(
    settings: Settings, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:
    with TestClient(create_app(settings, ray=fake_ray, tracker=fake_tracker, run_engine=False)) as client:
        key = make_team(client.app.state.db, "nlp")  # type: ignore[attr-defined]
        job_id = submit(client, key)["id"]
        client.app.state.engine.tick()  # type: ignore[attr-defined]
        fake_ray.set(f"{job_id}-a1", "RUNNING")
        client.app.state.engine.tick()  # type: ignore[attr-defined]
    # the service is down while the sweep finishes; a new process reconciles
    fake_ray.set(f"{job_id}-a1", "SUCCEEDED", logs=summary_line(job_id))
    with TestClient(create_app(settings, ray=fake_ray, tracker=fake_tracker, run_engine=False)) as client:
        engine = client.app.state.engine  # type: ignore[attr-defined]
        assert not engine.reconciled
        engine.tick()
        engine.tick()
        assert engine.reconciled
        job = read(client, key, job_id)
        assert job["state"] == "SUCCEEDED" and job["attempt"] == 1
        assert states(client.app.state.db, job_id).count("SUCCEEDED") == 1  # type: ignore[attr-defined]
    assert fake_ray.submissions == [f"{job_id}-a1"]


def test_an_attempt_recorded_but_never_accepted_is_submitted_once_with_the_same_id(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay
) -> None:
    job_id = submit(client, team_key)["id"]
    engine.refresh_capacity()
    fake_ray.down = True  # the attempt is recorded, then the Ray call fails
    engine.dispatcher.schedule(engine.capacity)
    job = read(client, team_key, job_id)
    assert job["state"] == "DISPATCHED" and job["attempts"][0]["state"] == "SUBMITTING"
    engine.tick()  # still down: nothing changes, nothing is lost
    assert read(client, team_key, job_id)["attempts"][0]["state"] == "SUBMITTING"
    fake_ray.down = False
    engine.tick()
    engine.tick()
    assert fake_ray.submissions == [f"{job_id}-a1"]
    assert read(client, team_key, job_id)["attempts"][0]["state"] == "SUBMITTED"


def test_a_lost_reply_is_not_a_second_dispatch(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay
) -> None:
    job_id = submit(client, team_key)["id"]
    fake_ray.submit(
        submission_id=f"{job_id}-a1", entrypoint="x", env_vars={}, metadata={}
    )  # Ray took it already
    engine.tick()
    job = read(client, team_key, job_id)
    assert job["attempts"][0]["state"] == "SUBMITTED" and len(fake_ray.jobs) == 1


def test_ray_refusing_a_job_fails_it(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, monkeypatch: Any
) -> None:
    def refuse(**_kw: Any) -> None:
        raise RayJobError("runtime_env is invalid")

    monkeypatch.setattr(fake_ray, "submit", refuse)
    job_id = submit(client, team_key)["id"]
    engine.tick()
    job = read(client, team_key, job_id)
    assert job["state"] == "FAILED" and "runtime_env is invalid" in job["message"]


def test_a_job_stopped_outside_smartune_fails(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay
) -> None:
    job_id = submit(client, team_key)["id"]
    engine.tick()
    fake_ray.set(f"{job_id}-a1", "STOPPED")
    engine.tick()
    job = read(client, team_key, job_id)
    assert job["state"] == "FAILED" and "outside smartune" in job["message"]


def test_ray_down_postpones_everything(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay
) -> None:
    job_id = submit(client, team_key)["id"]
    engine.tick()
    fake_ray.down = True
    engine.tick()
    assert engine.last_error and "down" in engine.last_error
    assert read(client, team_key, job_id)["state"] == "DISPATCHED"
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["database"] == "ok"
    fake_ray.down = False
    assert client.get("/readyz").json() == {
        "status": "ok",
        "database": "ok",
        "ray": "ok",
    }


def test_two_teams_with_one_gpu_each_share_a_two_gpu_pool(
    client: TestClient, db: Database, engine: Engine, fake_ray: FakeRay, admin_key: str
) -> None:
    fake_ray.gpus = 2
    a, b = make_team(db, "alpha", gpu_quota=1), make_team(db, "beta", gpu_quota=1)
    gpu_spec = spec(resources={"gpus": 1})
    a1 = submit(client, a, gpu_spec)["id"]
    a2 = submit(client, a, spec(resources={"gpus": 1}, seeds=[2]))["id"]
    b1 = submit(client, b, gpu_spec)["id"]
    engine.tick()
    assert [read(client, a, a1)["state"], read(client, a, a2)["state"], read(client, b, b1)["state"]] == [
        "DISPATCHED",
        "QUEUED",
        "DISPATCHED",
    ]
    assert read(client, a, a2)["wait_reason"] == "team quota: 1/1 GPUs in use, needs 1 GPU at its peak"
    pool = client.get("/api/v1/pool", headers=auth(a)).json()
    assert pool["capacity"] == {"cpus": 8.0, "gpus": 2.0} and pool["free"]["gpus"] == 0
    usage = {t["team"]: (t["gpus_in_use"], t["jobs_running"], t["jobs_queued"]) for t in pool["teams"]}
    assert usage == {"alpha": (1.0, 1, 1)}  # a team's key sees its own team, and the others as totals
    assert pool["others"] == {"teams": 1, "gpus_in_use": 1.0, "jobs_running": 1, "jobs_queued": 0}
    pool = client.get("/api/v1/pool", headers=auth(admin_key)).json()
    usage = {t["team"]: (t["gpus_in_use"], t["jobs_running"], t["jobs_queued"]) for t in pool["teams"]}
    assert usage == {"alpha": (1.0, 1, 1), "beta": (1.0, 1, 0)} and pool["others"] is None
    queue = client.get("/api/v1/pool/queue", headers=auth(a)).json()
    assert queue["data"] == [
        {
            "position": 1,
            "job_id": a2,
            "team": "alpha",
            "priority": 0,
            "cpus": 1.0,
            "gpus": 1.0,
            "queued_at": queue["data"][0]["queued_at"],
            "reason": "team quota: 1/1 GPUs in use, needs 1 GPU at its peak",
        }
    ]
    fake_ray.set(f"{a1}-a1", "SUCCEEDED", logs=summary_line(a1))
    engine.tick()  # a1 ends, then the same round admits a2
    assert read(client, a, a2)["state"] == "DISPATCHED" and read(client, a, a2)["wait_reason"] is None
    reasons = [t["reason"] for t in read(client, a, a2)["transitions"]]
    assert reasons[1].startswith("admitted: priority 0, team alpha at 0 GPUs in use / weight 1")


def test_cancel_while_the_attempt_is_being_submitted(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay
) -> None:
    job_id = submit(client, team_key)["id"]
    engine.refresh_capacity()
    fake_ray.down = True
    engine.dispatcher.schedule(engine.capacity)  # recorded SUBMITTING, never reached Ray
    fake_ray.down = False
    assert client.post(f"/api/v1/jobs/{job_id}/cancel", headers=auth(team_key)).json()["state"] == "CANCELLED"
    engine.tick()
    engine.tick()
    assert fake_ray.submissions == []
    job = read(client, team_key, job_id)
    assert job["attempts"][0]["state"] == "STOPPED" and job["state"] == "CANCELLED"


def test_a_job_in_its_last_wave_reserves_only_its_unfinished_trials(
    client: TestClient, db: Database, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:
    """N trials, 2 at a time, 1 GPU each: the job holds 2 GPUs until N - 1 of its trials have ended for good;
    then only its last trial's GPU, and the team's next job fits in its 2-GPU quota in the same round as
    the trial sync that saw it. A trial in ERROR may still be retried, so it keeps its GPU reserved."""
    from service.engine.tracking import TrialRun

    fake_ray.gpus = 4
    key = make_team(db, "alpha", gpu_quota=2)
    wide = submit(
        client, key, spec(resources={"gpus": 1}, seeds=[1, 2, 3], limits={"max_concurrent_trials": 2})
    )
    engine.tick()
    fake_ray.set(f"{wide['id']}-a1", "RUNNING")
    narrow = submit(client, key, spec(resources={"gpus": 1}, seeds=[9]))["id"]
    engine.tick()
    assert read(client, key, narrow)["wait_reason"] == "team quota: 2/2 GPUs in use, needs 1 GPU at its peak"

    def trials(*states: str) -> None:
        fake_tracker.trials[wide["id"]] = [
            TrialRun(trial_id=f"t{i}", run_id=f"r{i}", attempt=1, state=state)
            for i, state in enumerate(states)
        ]

    done = ["TERMINATED"] * (wide["n_trials"] - 2)
    trials(*done, "ERROR", "RUNNING")
    engine.tick()
    engine.tick()
    assert read(client, key, narrow)["state"] == "QUEUED"
    trials(*done, "STOPPED", "RUNNING")
    engine.tick()
    assert read(client, key, narrow)["state"] == "DISPATCHED"


def test_with_many_running_jobs_each_is_read_from_mlflow_less_often_and_an_ended_one_at_once(
    client: TestClient, team_key: str, engine: Engine, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:
    """Two running jobs at 0.5 reads a second: each job's trials are read at most every 4 s; a job whose Ray
    job ended is read in the round that sees it, due or not."""
    watcher = engine.watcher
    watcher.settings = watcher.settings.model_copy(update={"mlflow_syncs_per_s": 0.5})
    now = [100.0]
    watcher.clock = lambda: now[0]
    reads: list[str] = []
    job_runs = fake_tracker.job_runs

    def counted(job_id: str, experiment: str | None = None) -> Any:
        reads.append(job_id)
        return job_runs(job_id, experiment)

    fake_tracker.job_runs = counted  # type: ignore[method-assign]
    first, second = (submit(client, team_key, spec(seeds=[seed]))["id"] for seed in (1, 2))
    engine.tick()
    for job_id in (first, second):
        fake_ray.set(f"{job_id}-a1", "RUNNING")
    engine.tick()
    assert sorted(reads) == sorted([first, second])  # never read before: both at once
    now[0] += 3.9
    engine.tick()
    assert len(reads) == 2  # 2 running jobs / 0.5 a second: 4 s apart
    now[0] += 0.2
    engine.tick()
    assert len(reads) == 4
    fake_ray.set(f"{first}-a1", "FAILED", message="stopped")
    now[0] += 0.1
    engine.tick()
    assert reads[4:] == [first]  # ended: read at once; the other is not due
