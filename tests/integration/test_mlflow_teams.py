"""MLflow per team against a real `mlflow server --app-name basic-auth` (started through the MLflow image's
entry script, deploy/mlflow/start.sh: `default_permission = NO_PERMISSIONS`; SQLite backend and auth store,
artifacts served by the server from a local folder; verified logins cached, as MLFLOW_AUTH_CACHE_TTL_SECONDS
allows, so each request does not hash a password again). The control plane's provisioner, logged in as the
admin, gives teams nlp (A) and vision (B) their users, experiments and registered models; A, logged in as
itself, creates runs, artifacts and logged models and registers three jobs' versions, `best` moving only on
a better dev score; B gets 403 on every one of A's, and B's squat on A's next model name is revoked. One
server for the file: about 50 s to start and 20 s of calls on two busy cores."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric, Param
from mlflow.exceptions import MlflowException

from service.config import Settings
from service.engine.mlflow_teams import MlflowTeamAccess
from service.engine.tracking import MlflowTracker
from tests.support.teamstack import MlflowServer, start_mlflow_server
from worker.contract.tags import MODEL_URI
from worker.tune.registration import register_best

ADMIN, ADMIN_PASSWORD = "admin", "admin-password-for-the-test"
SECRET = "the-deployment-secret-of-the-mlflow-team-test"
PARAMS = {"task": "rte", "data": "None", "columns": "None", "max_eval_samples": "16", "sampling": "random",
          "fraction_seed": "13"}  # fmt: skip


@pytest.fixture(scope="module")
def mlflow_auth(tmp_path_factory: pytest.TempPathFactory, starts_processes: None) -> Iterator[MlflowServer]:
    folder = tmp_path_factory.mktemp("mlflow-auth")
    server = start_mlflow_server(backend_uri=f"sqlite:///{folder / 'mlflow.db'}",
                                 auth_db_uri=f"sqlite:///{folder / 'auth.db'}", artifacts=str(folder / "artifacts"),
                                 env={}, username=ADMIN, password=ADMIN_PASSWORD)  # start.sh's defaults  # fmt: skip
    try:
        yield server
    finally:
        server.stop()


def test_the_entry_script_caches_logins_and_starts_no_job_runner(mlflow_auth: MlflowServer) -> None:
    """deploy/mlflow/start.sh's defaults: a verified login is trusted for 60 s (with 0 every request hashes
    its password: PBKDF2, tens of milliseconds to a second of CPU each) and MLflow's job execution is off
    (with it on, every server starts a job runner and Huey consumers that poll)."""
    (ini,) = mlflow_auth.folder.glob("basic_auth.*.ini")
    assert "auth_cache_ttl_seconds = 60" in ini.read_text()
    commands = _session_commands(mlflow_auth.process.pid)  # the server and what it started (its session)
    assert commands and not [c for c in commands if "huey" in c or "_job_runner" in c], commands


def _session_commands(leader: int) -> list[str]:
    """Command lines of the processes in `leader`'s session (start_mlflow_server starts a new one)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            session = int(stat.read_text().rsplit(")", 1)[1].split()[3])  # after state, ppid, pgrp
            if session == leader:
                found.append((stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, ValueError):
            continue  # ended while read
    return found


class Logins:
    """Switches the process's MLflow login (MLflow's clients read it from the environment at each call)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, settings: Settings) -> None:
        self.monkeypatch, self.settings = monkeypatch, settings

    def admin(self) -> None:
        self._set(ADMIN, ADMIN_PASSWORD)

    def team(self, team: str) -> None:
        login = self.settings.team_mlflow_login(team)
        assert login is not None
        self._set(*login)

    def _set(self, user: str, password: str) -> None:
        self.monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", user)
        self.monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)


def _trial(client: MlflowClient, experiment: str, job: str, score: float) -> str:
    """A finished trial's run of job `job` as the sweep leaves it: params, metrics, a checkpoint, a model."""
    run = client.create_run(experiment, tags={"smartune.job_id": job, "smartune.trial_id": "t1"})
    run_id = run.info.run_id
    params = [Param(key, value) for key, value in PARAMS.items()]
    client.log_batch(run_id, metrics=[Metric("best_score", score, 0, 0)], params=params)
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text("{}")
        client.log_artifacts(run_id, folder, "best_checkpoint")
        model = client.create_logged_model(experiment_id=experiment, name="model", source_run_id=run_id)
        client.log_model_artifacts(model.model_id, folder)
    client.finalize_logged_model(model.model_id, "READY")
    client.set_tag(run_id, MODEL_URI, f"models:/{model.model_id}")
    return run_id


def _register(client: MlflowClient, job: str, run_id: str) -> dict[str, Any]:
    return register_best(client, team="nlp", task="rte", job_id=job, spec_hash=f"hash-{job}",
                         best={"run_id": run_id, "trial_id": "t1"}, main_metric="accuracy")  # fmt: skip


def _refused(call: Any) -> str:
    with pytest.raises(MlflowException) as caught:
        call()
    return str(caught.value)


def test_each_team_reaches_its_own_experiment_and_models_and_nothing_of_another(
    mlflow_auth: MlflowServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # a 403 is an answer, not a reason to retry
    settings = Settings(data_dir=tmp_path, mlflow_tracking_uri=mlflow_auth.url, mlflow_team_secret=SECRET,
                        mlflow_tracking_password=ADMIN_PASSWORD, mlflow_timeout_s=30)  # fmt: skip
    login = Logins(monkeypatch, settings)
    login.admin()
    access = MlflowTeamAccess(settings)
    access.ensure("nlp", ["rte"])
    access.ensure("vision", ["rte"])
    MlflowTeamAccess(settings).ensure("nlp", ["rte"])  # a restarted service: the same, idempotently

    login.team("nlp")
    a = MlflowClient(mlflow_auth.url)
    experiment = a.get_experiment_by_name("smartune-nlp").experiment_id
    first_run = _trial(a, experiment, "job-1", 0.70)
    first = _register(a, "job-1", first_run)
    assert first["name"] == "smartune-nlp-rte" and first["version"] == "1" and first["alias_moved"] is True
    worse = _register(a, "job-2", _trial(a, experiment, "job-2", 0.65))
    assert worse["version"] == "2" and worse["alias_moved"] is False and worse["best_version"] == "1"
    better = _register(a, "job-3", _trial(a, experiment, "job-3", 0.75))
    assert better["version"] == "3" and better["alias_moved"] is True
    assert str(a.get_model_version_by_alias("smartune-nlp-rte", "best").version) == "3"
    assert {e.name for e in a.search_experiments()} == {"smartune-nlp"}

    login.team("vision")
    b = MlflowClient(mlflow_auth.url)
    for call in (
        lambda: b.get_experiment(experiment),
        lambda: b.get_experiment_by_name("smartune-nlp"),
        lambda: b.get_run(first_run),
        lambda: b.log_metric(first_run, "stolen", 1.0),
        lambda: b.create_run(experiment),
        lambda: b.get_registered_model("smartune-nlp-rte"),
        lambda: b.get_model_version_by_alias("smartune-nlp-rte", "best"),
        lambda: b.set_registered_model_alias("smartune-nlp-rte", "best", "2"),
        lambda: b.download_artifacts(first_run, "best_checkpoint", str(tmp_path)),
    ):
        assert "403" in _refused(call)
    # The artifacts themselves, through the server's proxy, and the searches: nothing of A's.
    artifact = f"{mlflow_auth.url}/api/2.0/mlflow-artifacts/artifacts/{experiment}/{first_run}/artifacts/best_checkpoint/config.json"
    team_b = settings.team_mlflow_login("vision")
    assert httpx.get(artifact, auth=team_b, timeout=10).status_code == 403
    assert [m.name for m in b.search_registered_models()] == ["smartune-vision-rte"]
    assert {e.name for e in b.search_experiments()} == {"smartune-vision"}
    own = b.create_run(b.get_experiment_by_name("smartune-vision").experiment_id)  # B's own work goes on
    b.log_metric(own.info.run_id, "best_score", 0.5)
    # B creates the model A's next task will need; A's provisioning takes it back.
    b.create_registered_model("smartune-nlp-mrpc")
    assert b.get_registered_model("smartune-nlp-mrpc").name == "smartune-nlp-mrpc"
    login.admin()
    access.ensure("nlp", ["mrpc"])
    login.team("vision")
    assert "403" in _refused(lambda: b.get_registered_model("smartune-nlp-mrpc"))
    login.team("nlp")
    assert a.get_registered_model("smartune-nlp-mrpc").tags["smartune.team"] == "nlp"

    assert httpx.get(artifact, auth=("smartune-team-nlp", "a wrong password"), timeout=10).status_code == 401
    assert httpx.get(artifact, auth=settings.team_mlflow_login("nlp"), timeout=10).status_code == 200
    login.admin()  # the service lists a team's models with the admin's login
    listed = {m.task: m for m in MlflowTracker(mlflow_auth.url, "smartune").models("nlp")}["rte"]
    assert (listed.name, listed.latest_version, listed.best_version, listed.best_job_id) == (
        "smartune-nlp-rte", "3", "3", "job-3",
    )  # fmt: skip
    assert listed.best_score == pytest.approx(0.75)
