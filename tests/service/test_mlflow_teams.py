"""MLflow per team, in process: each team's login derived from the deployment's secret, the permission plan
(MANAGE on its own experiment and models, other teams' users' grants on them revoked), the provisioner's
calls against an in-memory MLflow admin, the job environment, and the engine provisioning teams and
postponing a dispatch while MLflow refuses. The real basic-auth server: tests/integration/test_mlflow_teams.py."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.config import Settings
from service.engine.dispatch import spec_tasks, submission
from service.engine.mlflow_admin import EXPERIMENT, REGISTERED_MODEL, MlflowRefused
from service.engine.mlflow_teams import MlflowTeamAccess, Resource, permission_plan, team_access
from service.engine.rounds import Engine
from service.main import create_app
from service.store import crud
from tests.service.fakes import FakeRay, FakeTracker
from tests.service.utils import make_team, spec, submit

SECRET = "a-deployment-secret-of-at-least-32-characters"
SERVER = {"mlflow_tracking_uri": "http://mlflow:5000", "mlflow_tracking_password": "admin-password-1234"}


def _with_secret(settings: Settings) -> Settings:
    return settings.model_copy(update={"mlflow_team_secret": SECRET, **SERVER})


# --- the login ---------------------------------------------------------------------------------------


def test_a_teams_login_is_derived_from_the_secret_and_its_name() -> None:
    settings = Settings(mlflow_team_secret=SECRET, **SERVER)
    user, password = settings.team_mlflow_login("nlp") or ("", "")
    assert user == "smartune-team-nlp"
    assert password == hmac.new(SECRET.encode(), b"nlp", hashlib.sha256).hexdigest()
    assert len(password) == 64 and settings.team_mlflow_login("nlp") == (user, password)  # nothing stored
    assert (settings.team_mlflow_login("vision") or ("", ""))[1] != password
    other = Settings(mlflow_team_secret=SECRET + "-rotated", **SERVER)
    assert (other.team_mlflow_login("nlp") or ("", ""))[1] != password
    assert Settings(**SERVER).team_mlflow_login("nlp") is None  # no secret: no users per team


def test_the_secret_needs_a_tracking_server_and_its_admin_login(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    with pytest.raises(ValidationError, match="needs an MLflow tracking server with basic auth"):
        Settings(mlflow_team_secret=SECRET)  # the embedded SQLite store has no users
    with pytest.raises(ValidationError, match="needs MLflow's admin login"):
        Settings(mlflow_team_secret=SECRET, mlflow_tracking_uri="http://mlflow:5000")


def test_production_refuses_a_short_or_default_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("service.config.secret_problems", _team_problem)
    for weak in ("changethis", "too-short"):
        with pytest.raises(
            ValidationError, match="SMARTUNE_MLFLOW_TEAM_SECRET is empty, a default or shorter"
        ):
            Settings(env="production", mlflow_team_secret=weak, **SERVER)


def _team_problem(settings: Any) -> list[str]:
    """Only the team secret's check (the other secrets of a production configuration are not the point)."""
    from service.secret_checks import secret_problems

    return [p for p in secret_problems(settings) if "MLFLOW_TEAM_SECRET" in p]


# --- the permission plan ------------------------------------------------------------------------------


def _user(uid: int, name: str, grants: Iterable[tuple[str, str, str]], admin: bool = False) -> dict[str, Any]:
    """A user as MLflow's users/list gives it: its own role `__user_<id>__` with its grants."""
    permissions = [{"resource_type": t, "resource_pattern": p, "permission": g} for t, p, g in grants]
    other_role = {"name": "readers", "permissions": [{"resource_type": EXPERIMENT, "resource_pattern": "7",
                                                       "permission": "READ"}]}  # fmt: skip
    return {"id": uid, "username": name, "is_admin": admin,
            "roles": [{"name": f"__user_{uid}__", "permissions": permissions}, other_role]}  # fmt: skip


def test_the_plan_grants_what_the_team_lacks_and_revokes_other_teams_grants() -> None:
    experiment, model = Resource(EXPERIMENT, "7"), Resource(REGISTERED_MODEL, "smartune-nlp-rte")
    users = [
        _user(1, "admin", [(EXPERIMENT, "7", "MANAGE")], admin=True),
        _user(2, "smartune-team-nlp", [(EXPERIMENT, "7", "MANAGE"), (REGISTERED_MODEL, "smartune-nlp-rte", "READ")]),
        _user(3, "smartune-team-vision", [(REGISTERED_MODEL, "smartune-nlp-rte", "MANAGE"), (EXPERIMENT, "9", "MANAGE")]),
        _user(4, "alice", [(EXPERIMENT, "7", "READ")]),  # a person's share, made by the admin: left alone
    ]  # fmt: skip
    plan = permission_plan("smartune-team-nlp", [experiment, model, model], users)
    assert plan.grant == (model,)  # MANAGE on the experiment held already; READ on the model is not enough
    assert plan.revoke == (("smartune-team-vision", model),)  # its squat; its own experiment 9 untouched
    # A role other than the user's own (a `readers` role holding experiment 7) is not the plan's business.
    assert permission_plan("smartune-team-nlp", [experiment], [_user(5, "smartune-team-x", [])]).revoke == ()
    fresh = permission_plan("smartune-team-new", [experiment], [])
    assert fresh.grant == (experiment,) and fresh.revoke == ()


# --- the provisioner, against an in-memory MLflow admin ----------------------------------------------


@dataclass
class FakeAdmin:
    """MLflow's users, grants, experiments and registered models in dicts; `calls` records every call."""

    passwords: dict[str, str] = field(default_factory=dict)
    grants: dict[str, dict[tuple[str, str], str]] = field(default_factory=dict)
    experiments: dict[str, str] = field(default_factory=dict)
    models: dict[str, dict[str, str]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    down: bool = False

    def _call(self, what: str) -> None:
        if self.down:
            raise ConnectionError("MLflow is down")
        self.calls.append(what)

    def set_user(self, username: str, password: str) -> bool:
        self._call(f"set_user {username}")
        created = username not in self.passwords
        self.passwords[username] = password
        self.grants.setdefault(username, {})
        return created

    def users(self) -> list[dict[str, Any]]:
        self._call("users")
        return [_user(i, name, [(t, r, p) for (t, r), p in self.grants[name].items()])
                for i, name in enumerate(sorted(self.grants), start=2)]  # fmt: skip

    def grant(self, username: str, resource_type: str, resource_id: str, permission: str = "MANAGE") -> None:
        self._call(f"grant {username} {resource_type} {resource_id}")
        self.grants[username][(resource_type, resource_id)] = permission

    def revoke(self, username: str, resource_type: str, resource_id: str) -> None:
        self._call(f"revoke {username} {resource_type} {resource_id}")
        del self.grants[username][(resource_type, resource_id)]

    def experiment_id(self, name: str) -> str:
        self._call(f"experiment {name}")
        return self.experiments.setdefault(name, str(len(self.experiments) + 1))

    def ensure_registered_model(self, name: str, tags: dict[str, str], description: str) -> None:
        self._call(f"model {name}")
        self.models.setdefault(name, {}).update(tags)


def _access(admin: FakeAdmin) -> MlflowTeamAccess:
    return MlflowTeamAccess(Settings(mlflow_team_secret=SECRET, **SERVER), admin)  # type: ignore[arg-type]


def test_a_team_gets_its_user_experiment_and_models_once() -> None:
    admin = FakeAdmin()
    access = _access(admin)
    access.ensure("nlp", ["rte", "stsb"])
    nlp = "smartune-team-nlp"
    assert admin.passwords[nlp] == hmac.new(SECRET.encode(), b"nlp", hashlib.sha256).hexdigest()
    assert admin.grants[nlp] == {(EXPERIMENT, "1"): "MANAGE", (REGISTERED_MODEL, "smartune-nlp-rte"): "MANAGE",
                                 (REGISTERED_MODEL, "smartune-nlp-stsb"): "MANAGE"}  # fmt: skip
    assert admin.experiments == {"smartune-nlp": "1"}
    assert admin.models["smartune-nlp-rte"] == {"smartune.team": "nlp", "smartune.task": "rte"}
    admin.calls.clear()
    access.ensure("nlp", ["rte"])  # done already: no call at all
    access.ensure_teams(["nlp"])
    assert admin.calls == []
    access.ensure("nlp", ["mrpc"])  # a new task: only its model, and its grant
    assert admin.calls == [
        "model smartune-nlp-mrpc",
        "users",
        f"grant {nlp} registered_model smartune-nlp-mrpc",
    ]


def test_another_teams_squat_on_a_teams_names_is_revoked() -> None:
    admin = FakeAdmin()
    admin.set_user("smartune-team-vision", "x")
    admin.grant("smartune-team-vision", REGISTERED_MODEL, "smartune-nlp-rte")  # created it first: MANAGE
    admin.experiments["smartune-nlp"] = "4"
    admin.grant("smartune-team-vision", EXPERIMENT, "4")
    _access(admin).ensure("nlp", ["rte"])
    assert admin.grants["smartune-team-vision"] == {}
    assert set(admin.grants["smartune-team-nlp"]) == {
        (EXPERIMENT, "4"),
        (REGISTERED_MODEL, "smartune-nlp-rte"),
    }


def test_a_restarted_service_sets_each_password_again() -> None:
    admin = FakeAdmin()
    admin.passwords["smartune-team-nlp"] = "an old secret's password"
    admin.grants["smartune-team-nlp"] = {}
    _access(admin).ensure("nlp")
    assert (
        admin.passwords["smartune-team-nlp"] == hmac.new(SECRET.encode(), b"nlp", hashlib.sha256).hexdigest()
    )


def test_provisioning_every_team_stops_at_a_failure_and_waits() -> None:
    admin = FakeAdmin(down=True)
    access = _access(admin)
    access.ensure_teams(["nlp", "vision"])  # never raises
    admin.down = False
    access.ensure_teams(["nlp", "vision"])  # within RETRY_S of the failure: MLflow is left alone
    with pytest.raises(RuntimeError, match="MLflow failed a moment ago"):
        access.ensure("nlp", ["rte"])  # a dispatch too: it is postponed at once, not after a timeout
    assert admin.calls == []
    access._retry_at = float("-inf")  # the wait is over
    access.ensure_teams(["nlp", "vision"])
    assert set(admin.passwords) == {"smartune-team-nlp", "smartune-team-vision"}


def test_a_refusal_is_named(tmp_path: Path) -> None:
    err = MlflowRefused("/api/2.0/mlflow/users/create", 403, "PERMISSION_DENIED", "Permission denied")
    assert (
        str(err) == "MLflow answered 403 PERMISSION_DENIED to /api/2.0/mlflow/users/create: Permission denied"
    )
    assert team_access(Settings(data_dir=tmp_path)) is None  # the embedded deployment: nothing to provision


# --- the job's environment and the engine --------------------------------------------------------------


def test_a_job_logs_in_as_its_team_and_only_where_teams_have_users(
    client: TestClient, settings: Settings, team_key: str
) -> None:
    job_id = submit(client, team_key, spec(task=["RTE", "stsb"]))["id"]
    with client.app.state.db.sessions() as session:  # type: ignore[attr-defined]
        job = crud.get_job(session=session, job_id=job_id, team_id=None)
        assert job is not None
        assert spec_tasks(job.spec_json) == ["rte", "stsb"]
        _, env, _ = submission(job, 1, settings)
        assert env["SMARTUNE_TEAM"] == "nlp"
        assert "MLFLOW_TRACKING_USERNAME" not in env and "MLFLOW_TRACKING_PASSWORD" not in env
        _, env, _ = submission(job, 1, _with_secret(settings))
    assert env["MLFLOW_TRACKING_USERNAME"] == "smartune-team-nlp"
    assert env["MLFLOW_TRACKING_PASSWORD"] == _with_secret(settings).team_mlflow_login("nlp")[1]  # type: ignore[index]


@dataclass
class FakeAccess:
    refusing: bool = False
    ensured: list[tuple[str, list[str]]] = field(default_factory=list)
    rounds: list[list[str]] = field(default_factory=list)

    def ensure(self, team: str, tasks: Sequence[str] = ()) -> None:
        if self.refusing:
            raise ConnectionError("MLflow is down")
        self.ensured.append((team, list(tasks)))

    def ensure_teams(self, teams: Iterable[str]) -> None:
        self.rounds.append(list(teams))


def test_the_engine_provisions_teams_and_a_jobs_models_before_ray_sees_it(
    settings: Settings, fake_ray: FakeRay, fake_tracker: FakeTracker
) -> None:
    access = FakeAccess(refusing=True)
    app = create_app(
        _with_secret(settings), ray=fake_ray, tracker=fake_tracker, access=access, run_engine=False
    )
    with TestClient(app) as client:
        engine: Engine = app.state.engine
        key = make_team(app.state.db, "nlp")
        make_team(app.state.db, "vision")
        job_id = submit(client, key)["id"]
        engine.tick()
        assert access.rounds[-1] == ["nlp", "vision"]  # every round offers the teams (new ones get users)
        assert fake_ray.submissions == []  # MLflow refused: the submission waits, Ray saw nothing
        assert (
            client.get(f"/api/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"}).json()["state"]
            == "DISPATCHED"
        )
        access.refusing = False
        engine.tick()  # the watcher hands the recorded attempt to Ray again
        assert fake_ray.submissions == [f"{job_id}-a1"]
        assert access.ensured == [("nlp", ["rte"])]
        assert fake_ray.jobs[f"{job_id}-a1"].env_vars["MLFLOW_TRACKING_USERNAME"] == "smartune-team-nlp"
