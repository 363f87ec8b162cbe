"""MLflow per team: each team logs in to MLflow as its own user, which may manage its own experiment and
registered models and nothing else (docs/deployment.md § MLflow per team).

With `SMARTUNE_MLFLOW_TEAM_SECRET` set, the engine (logged in as MLflow's admin, service.engine.mlflow_admin)
gives each team, idempotently:
- the user `smartune-team-<team>` with the password `Settings.team_mlflow_login` derives (set again on each
  start of the service, so a new secret takes effect without a stored password);
- its experiment (`Settings.team_experiment`), created by the admin if missing, and MANAGE on it;
- per task its jobs run, the registered model `smartune-<team>-<task>` (worker.contract.model_registry),
  created by the admin if missing and tagged with its team and task, and MANAGE on it.
MLflow's basic-auth app must run with `default_permission = NO_PERMISSIONS` (deploy/mlflow/start.sh's
default), so a user sees nothing it was not granted: another team's experiment, runs, artifacts, logged
and registered models answer 403. Another team's user holding a grant of its own on these resources (it
created the experiment or model under that name before this team's first job: MLflow gives a creator
MANAGE) loses it (`permission_plan`); users other than the teams' are left alone.

A team is provisioned by the engine's first round after it was created (API or `smartune admin`), and its
registered models before its job is handed to Ray (service.engine.dispatch: a failure postpones the
submission to a later round, as Ray being unreachable does). What was done is remembered per process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from service.config import MLFLOW_TEAM_USER_PREFIX, Settings
from service.engine.mlflow_admin import EXPERIMENT, MANAGE, REGISTERED_MODEL, MlflowAdmin
from worker.contract.model_registry import TASK_TAG, TEAM_TAG, registered_model_name

logger = logging.getLogger(__name__)

RETRY_S = 30.0  # after a failed provisioning round, MLflow is left alone this long (not every round)


@dataclass(frozen=True)
class Resource:
    type: str  # EXPERIMENT or REGISTERED_MODEL
    id: str  # an experiment's id, a registered model's name


@dataclass(frozen=True)
class PermissionPlan:
    grant: tuple[Resource, ...]  # MANAGE for the team's user (what it does not hold yet)
    revoke: tuple[tuple[str, Resource], ...]  # (another team's user, its own grant on one of them)


def _own_grants(user: Mapping[str, Any]) -> Iterable[tuple[Resource, str]]:
    """(resource, permission) of the user's own role, the one MLflow's per-user grants write."""
    own = f"__user_{user.get('id')}__"
    for role in user.get("roles") or []:
        if role.get("name") == own:
            for grant in role.get("permissions") or []:
                yield (
                    Resource(str(grant.get("resource_type")), str(grant.get("resource_pattern"))),
                    str(grant.get("permission")),
                )


def permission_plan(
    team_user: str, owned: Iterable[Resource], users: Iterable[Mapping[str, Any]]
) -> PermissionPlan:
    """What makes `owned` the team's alone: MANAGE for `team_user` where it lacks it, and every other team
    user's own grant on one of them revoked. `users`: MLflow's users/list answer."""
    owned = tuple(dict.fromkeys(owned))
    wanted = set(owned)
    held: set[Resource] = set()
    revoke: list[tuple[str, Resource]] = []
    for user in users:
        name = str(user.get("username"))
        if name == team_user:
            held |= {resource for resource, permission in _own_grants(user) if permission == MANAGE}
        elif name.startswith(MLFLOW_TEAM_USER_PREFIX) and not user.get("is_admin"):
            revoke += [(name, resource) for resource, _ in _own_grants(user) if resource in wanted]
    return PermissionPlan(tuple(r for r in owned if r not in held), tuple(revoke))


class TeamAccess(Protocol):
    """What the engine asks of MLflow for a team (None where the deployment has no users per team)."""

    def ensure(self, team: str, tasks: Sequence[str] = ()) -> None:
        """The team's user, experiment and registered models of `tasks`, each granted to it alone."""
        ...

    def ensure_teams(self, teams: Iterable[str]) -> None:
        """`ensure(team)` for each team not done yet; never raises (a failure waits `RETRY_S`)."""
        ...


class MlflowTeamAccess:
    """`TeamAccess` on a tracking server with MLflow's basic-auth app."""

    def __init__(self, settings: Settings, admin: MlflowAdmin | None = None) -> None:
        self.settings = settings
        self.admin = admin or MlflowAdmin(settings.tracking_uri, settings.mlflow_timeout_s)
        self._teams: set[str] = set()
        self._models: set[str] = set()
        self._lock = threading.Lock()
        self._retry_at = float("-inf")  # after a failure, MLflow is left alone until then

    def ensure(self, team: str, tasks: Sequence[str] = ()) -> None:
        login = self.settings.team_mlflow_login(team)
        if login is None:
            raise ValueError("SMARTUNE_MLFLOW_TEAM_SECRET is unset: no MLflow users per team")
        models = {registered_model_name(team, task): task for task in tasks}
        with self._lock:
            missing = {name: task for name, task in models.items() if name not in self._models}
            if team in self._teams and not missing:
                return
            if (wait := self._retry_at - time.monotonic()) > 0:  # a hung MLflow must not stall every round
                raise RuntimeError(f"MLflow failed a moment ago; the next try in {wait:.0f} s")
            try:
                self._provision(team, login, missing)
            except Exception:
                self._retry_at = time.monotonic() + RETRY_S
                raise

    def _provision(self, team: str, login: tuple[str, str], missing: dict[str, str]) -> None:
        """The team's user and experiment (once), the `missing` registered models (name -> task), grants."""
        owned: list[Resource] = []
        if team not in self._teams:
            if self.admin.set_user(*login):
                logger.info("MLflow user %s created", login[0])
            owned.append(Resource(EXPERIMENT, self.admin.experiment_id(self.settings.team_experiment(team))))
        for name, task in missing.items():
            description = (f"Every smartune job of team {team} on {task}: one version per job; the alias "
                           "`best` names the best dev score among versions scored on the same dev rows.")  # fmt: skip
            self.admin.ensure_registered_model(name, {TEAM_TAG: team, TASK_TAG: task}, description)
            owned.append(Resource(REGISTERED_MODEL, name))
        plan = permission_plan(login[0], owned, self.admin.users())
        for user, resource in plan.revoke:
            logger.warning("MLflow: %s loses its grant on %s %s of team %s", user, resource.type, resource.id,
                           team)  # fmt: skip
            self.admin.revoke(user, resource.type, resource.id)
        for resource in plan.grant:
            self.admin.grant(login[0], resource.type, resource.id, MANAGE)
        self._teams.add(team)
        self._models |= set(missing)

    def ensure_teams(self, teams: Iterable[str]) -> None:
        if time.monotonic() < self._retry_at:
            return
        for team in teams:
            if team in self._teams:
                continue
            try:
                self.ensure(team)
            except Exception as err:  # MLflow down or refusing: the next try after RETRY_S
                logger.warning("MLflow user of team %s not provisioned yet: %s", team, err)
                return


def team_access(settings: Settings) -> MlflowTeamAccess | None:
    """The deployment's `TeamAccess`: None without `mlflow_team_secret` (no MLflow users per team)."""
    return MlflowTeamAccess(settings) if settings.mlflow_team_secret else None
