"""The model registry: each job's best model of a task, as a version of the team's registered model of it.

At the end of a sweep the driver adds the best trial's model of each task as a version of
`smartune-<team>-<task>` (worker.contract.model_registry), which collects every job's versions. The version
is tagged with the job id, the trial, the spec hash, the dev score with its metric, and the digest of the
dev rows it was scored on (with `max_eval_samples`, readable). The alias `best` moves to it only when it
beats the version `best` names on the same dev rows (worker.tune.model_alias); the version's
`smartune.alias_note` says what happened and why, and so does the summary's record (`alias_moved`,
`alias_note`, `best_version`). `models:/smartune-<team>-<task>@best` loads the team's best model of the
task; the record's `uri`, `models:/<name>/<version>`, this job's.

A later attempt with the same best trial reuses its version; one with another best adds a version (tagged
with the same job id). A best trial without a logged model (stopped early by ASHA or the time budget
before its end) gets one first, from its `best_checkpoint` (worker.tune.registry). In a deployment with
MLflow users per team the control plane has created the registered model and given the team's user
MANAGE on it before the job ran; a local store has no users, and the driver creates it. Nothing here may
fail the sweep: `register_best` returns the outcome, with the reason when it failed.

Two jobs of one team and task that register at the same moment may both compare with the same `best`:
the later write of the alias wins (MLflow has no compare-and-set on aliases).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Run
from mlflow.exceptions import MlflowException

from worker.contract.model_registry import (
    ALIAS,
    ALIAS_NOTE,
    DEV_SCORE,
    EVAL_ROWS,
    MAIN_METRIC,
    MAX_EVAL_SAMPLES,
    TASK_TAG,
    TEAM_TAG,
    registered_model_name,
)
from worker.contract.tags import (
    JOB,
    MODEL_URI,
    PARENT,
    REGISTERED_MODEL,
    REGISTERED_VERSION,
    REGISTRY_ERROR,
    SPEC_HASH,
    TRIAL,
)
from worker.tune.model_alias import UNSET, Scored, decide, eval_rows_digest
from worker.tune.registry import log_best_model
from worker.tune.tracking import retrying, tracking_store

logger = logging.getLogger(__name__)


def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def dev_score(run: Run) -> float | None:
    """The trial's dev main metric at its chosen epoch: `dev_score_at_best` when it chose on held-out
    training rows (`validation_fraction`), else `best_score` (chosen on dev, so its dev score)."""
    metrics = run.data.metrics
    value = metrics.get("dev_score_at_best", metrics.get("best_score"))
    return float(value) if value is not None and math.isfinite(value) else None


def trial_params(client: MlflowClient, run: Run) -> dict[str, str]:
    """The resolved trial config of `run` (a trial's run, or a multitask trial's run of one task, whose
    trial run is its parent and holds the params)."""
    if "task" in run.data.params or PARENT not in run.data.tags:
        return dict(run.data.params)
    return dict(retrying(lambda: client.get_run(run.data.tags[PARENT])).data.params)


def _missing(err: MlflowException) -> bool:
    return bool(err.error_code == "RESOURCE_DOES_NOT_EXIST")


def ensure_registered_model(client: MlflowClient, name: str, team: str, task: str) -> None:
    """`name` exists and carries its team and task (by which the control plane lists a team's models)."""
    try:
        tags = client.get_registered_model(name).tags
    except MlflowException as err:
        if not _missing(err):
            raise
        description = (
            f"Every smartune job of team {team} on {task}: one version per job; the alias `best` names the "
            "version with the best dev score among those scored on the same dev rows."
        )
        try:
            client.create_registered_model(name, {TEAM_TAG: team, TASK_TAG: task}, description)
            return
        except MlflowException as again:  # created meanwhile by another job's driver
            if again.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            tags = {}
    for key, value in ((TEAM_TAG, team), (TASK_TAG, task)):
        if tags.get(key) != value:
            client.set_registered_model_tag(name, key, value)


def _version_of(client: MlflowClient, name: str, model_id: str) -> str | None:
    """The version of `name` already registered from the logged model `model_id` (a rerun), if any."""
    for version in client.search_model_versions(f"name = '{name}'"):
        if version.model_id == model_id or version.source == f"models:/{model_id}":
            return str(version.version)
    return None


def current_best(client: MlflowClient, name: str) -> Scored | None:
    """The version `best` names, as the rule reads it; None when no version holds it."""
    version = client.get_registered_model(name).aliases.get(ALIAS)
    if version is None:
        return None
    try:
        tags = client.get_model_version(name, str(version)).tags
    except MlflowException as err:
        if _missing(err):  # the version was deleted under its alias
            return None
        raise
    return Scored(str(version), _float(tags.get(DEV_SCORE)), tags.get(EVAL_ROWS))


def move_alias(client: MlflowClient, name: str, new: Scored, metric: str) -> dict[str, Any]:
    """Applies the rule to `new` (a version of `name`): moves `best` when it wins, notes why on the
    version either way. Returns `alias_moved`, `alias_note` and `best_version` for the summary."""
    current = current_best(client, name)
    moved, note = decide(new, current, metric)
    if moved and (current is None or current.version != new.version):
        client.set_registered_model_alias(name, ALIAS, new.version)
    client.set_model_version_tag(name, new.version, ALIAS_NOTE, note)
    best = new.version if moved else (current.version if current is not None else None)
    return {"alias_moved": moved, "alias_note": note, "best_version": best}


def register_best(
    client: MlflowClient,
    *,
    team: str,
    task: str,
    job_id: str,
    spec_hash: str,
    best: Mapping[str, Any] | None,
    main_metric: str,
) -> dict[str, Any]:
    """Adds the best trial's model of `task` (`best["run_id"]`: the trial's run, or a multitask trial's
    run of the task) as this job's version of `smartune-<team>-<task>` and applies the alias rule.
    Returns what the summary records: name, alias, version (None when nothing was registered, with
    `error` saying why), uri, best_version, alias_moved, alias_note, dev_score; never raises."""
    name = registered_model_name(team, task)
    record: dict[str, Any] = {"name": name, "alias": ALIAS, "version": None}
    if best is None or not best.get("run_id"):
        return record | {"error": "no trial completed: nothing to register"}
    run_id = str(best["run_id"])
    try:
        run = retrying(lambda: client.get_run(run_id))
        model_uri = run.data.tags.get(MODEL_URI) or log_best_model(client, run_id)
        params = trial_params(client, run)
        score = dev_score(run)
        scored_on = eval_rows_digest(params, task, main_metric)
        tags = {
            JOB: job_id,
            TRIAL: str(best.get("trial_id")),
            SPEC_HASH: spec_hash,
            MAIN_METRIC: main_metric,
            EVAL_ROWS: scored_on,
            MAX_EVAL_SAMPLES: params.get("max_eval_samples", UNSET).replace(UNSET, "all"),
        } | ({DEV_SCORE: repr(score)} if score is not None else {})
        with tracking_store(client.tracking_uri):  # the SQL registry's `models:/` lookups read only it
            import mlflow

            ensure_registered_model(client, name, team, task)
            version = _version_of(client, name, model_uri.removeprefix("models:/"))
            if version is None:
                version = str(mlflow.register_model(model_uri, name, tags=tags).version)
            alias = move_alias(client, name, Scored(version, score, scored_on), main_metric)
    except Exception as err:
        logger.warning("could not register the best model of job %s as %s", job_id, name, exc_info=True)
        return record | {"error": f"{type(err).__name__}: {err}"[:1000]}
    where = {"version": version, "uri": f"models:/{name}/{version}", "best_uri": f"models:/{name}@{ALIAS}"}
    made = {"dev_score": score, "model_uri": model_uri, "run_id": run_id, "trial_id": best.get("trial_id")}
    return record | alias | where | made


def registry_tags(registered: Mapping[str, Any]) -> dict[str, Any]:
    """The parent run's record of the registration (None values are not set)."""
    return {
        REGISTERED_MODEL: registered["name"],
        REGISTERED_VERSION: registered.get("version"),
        REGISTRY_ERROR: registered.get("error"),
    }
