"""A team's registered models, read back from MLflow: one per task, `smartune-<team>-<task>`, each with its
latest version and the version its alias `best` names (worker.contract.model_registry).

A model is the team's when its tags name the team and a task and its name is the one those two give: a
name alone cannot say where the team ends (`smartune-a-b-rte` is team `a-b`'s model of `rte`, not team
`a`'s of `b-rte`), and a name another team chose for its own model never lists here. `client` is an
`MlflowClient` (the service's, logged in as the admin where MLflow has users).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from worker.contract.model_registry import (
    ALIAS,
    DEV_SCORE,
    MAIN_METRIC,
    PREFIX,
    TASK_TAG,
    TEAM_TAG,
    registered_model_name,
)
from worker.contract.tags import JOB

MAX_MODELS = 1000  # registered models read per team (one per task it ran)


@dataclass(frozen=True)
class TeamModel:
    name: str
    team: str
    task: str
    latest_version: str | None
    best_version: str | None  # the version the alias `best` names; None before any scored version
    best_score: float | None  # that version's dev score (its `smartune.dev_score`)
    metric: str | None  # which metric the score is
    best_job_id: str | None  # the job whose version it is


def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def _is_teams(model: Any, team: str) -> bool:
    tags = model.tags or {}
    task = tags.get(TASK_TAG)
    return tags.get(TEAM_TAG) == team and bool(task) and model.name == registered_model_name(team, str(task))


def team_models(client: Any, team: str) -> list[TeamModel]:
    """The team's registered models by name, each with its latest and its best version."""
    found = client.search_registered_models(f"name LIKE '{PREFIX}-{team}-%'", max_results=MAX_MODELS)
    out = []
    for model in found:
        if not _is_teams(model, team):  # `_` in a team's name matches any character in LIKE
            continue
        versions = [int(v.version) for v in model.latest_versions or []]
        best = (model.aliases or {}).get(ALIAS)
        tags = client.get_model_version(model.name, str(best)).tags if best is not None else {}
        out.append(
            TeamModel(
                name=model.name,
                team=team,
                task=model.tags[TASK_TAG],
                latest_version=str(max(versions)) if versions else None,
                best_version=str(best) if best is not None else None,
                best_score=_float(tags.get(DEV_SCORE)),
                metric=tags.get(MAIN_METRIC),
                best_job_id=tags.get(JOB),
            )
        )
    return sorted(out, key=lambda m: m.name)
