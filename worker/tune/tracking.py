"""MLflow records of a sweep: one parent run per job, one child run per trial, found again by tags.

The run layout and tag names are the contract with the control plane (worker.contract.tags). Runs are
looked up by tags rather than remembered in memory, so a retried trial, or a later attempt of
the job on a new Ray head, continues the same runs. Only the MLflow client is used (no fluent state), except
inside `tracking_store`, for the few MLflow calls that read only the process-wide tracking URI.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from mlflow import MlflowClient
from mlflow.entities import Metric, Param, Run, RunTag

from worker.contract.grid import flat_config
from worker.contract.tags import (
    ATTEMPT,
    ERROR_CLASS,
    ERROR_MESSAGE,
    JOB,
    KIND,
    PARENT,
    SPEC_HASH,
    STATE,
    TRIAL,
    State,
)
from worker.contract.trial import TrainConfig

T = TypeVar("T")
# smartune.state -> MLflow run status when the trial is over (an early stop is a normal end).
_FINAL_STATUS = {"TERMINATED": "FINISHED", "STOPPED": "FINISHED", "ERROR": "FAILED"}


class SpecMismatchError(ValueError):
    """A job id that already ran a different spec (its parent run records another spec hash)."""


@dataclass(frozen=True)
class TrackingTarget:
    """Where a job's runs live; plain data, so it travels to trial processes and into Tune's state."""

    tracking_uri: str
    experiment_id: str
    job_id: str

    def client(self) -> MlflowClient:
        return MlflowClient(tracking_uri=self.tracking_uri)


LOCKED = ("database is locked",)  # SQLite: another writer holds the file
# A get-or-create that lost its race to a concurrent writer (SQLite, PostgreSQL): the next try reads the row.
CREATED_MEANWHILE = ("UNIQUE constraint failed", "duplicate key value violates unique constraint")


def retrying(call: Callable[[], T], tries: int = 6, transient: tuple[str, ...] = LOCKED) -> T:
    """`call()`, retried with back-off while it fails with one of the `transient` messages (by default: a
    SQLite store locked by a concurrent writer)."""
    for attempt in range(tries):
        try:
            return call()
        except Exception as err:
            if not any(m in str(err) for m in transient) or attempt == tries - 1:
                raise
            time.sleep(0.2 * 2**attempt)
    raise AssertionError("unreachable")


@contextmanager
def tracking_store(uri: str) -> Iterator[None]:
    """MLflow's process-wide tracking URI set to `uri` for the block, then put back, the environment variable
    `MLFLOW_TRACKING_URI` (which MLflow sets and unsets along with it) included: some MLflow calls (logging a
    model, the SQL registry's `models:/` lookups) read only that URI, never a client's."""
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    before = os.environ.get("MLFLOW_TRACKING_URI")
    try:
        with _use_tracking_uri(uri):
            yield
    finally:
        if before is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = before


def ensure_experiment(client: MlflowClient, name: str, artifact_root: str | None) -> str:
    existing = client.get_experiment_by_name(name)
    if existing is not None:
        return str(existing.experiment_id)
    try:
        return str(client.create_experiment(name, artifact_location=artifact_root))
    except Exception:  # created meanwhile by another driver
        again = client.get_experiment_by_name(name)
        if again is None:
            raise
        return str(again.experiment_id)


def _quote(value: str) -> str:
    return "'" + value.replace("'", "\\'") + "'"


def find_runs(client: MlflowClient, target: TrackingTarget, **tags: str) -> list[Run]:
    """Runs of the job carrying all `tags` (`kind="sweep"`, `trial_id="..."`, ...), every page."""
    clauses = [f"tags.`{JOB}` = {_quote(target.job_id)}"]
    clauses += [f"tags.`smartune.{key}` = {_quote(value)}" for key, value in tags.items()]
    runs: list[Run] = []
    token: str | None = None
    while True:
        page = retrying(
            partial(
                client.search_runs,
                [target.experiment_id],
                " and ".join(clauses),
                max_results=1000,
                page_token=token,
            )
        )
        runs += list(page)
        token = page.token
        if not token:
            return runs


def set_tags(client: MlflowClient, run_id: str, tags: Mapping[str, Any]) -> None:
    batch = [RunTag(k, str(v)) for k, v in tags.items() if v is not None]
    if batch:
        retrying(lambda: client.log_batch(run_id, tags=batch))


def log_metrics(client: MlflowClient, run_id: str, metrics: Mapping[str, float], step: int) -> None:
    now = int(time.time() * 1000)
    batch = [Metric(k, float(v), now, step) for k, v in metrics.items()]
    for i in range(0, len(batch), 500):
        retrying(partial(client.log_batch, run_id, metrics=batch[i : i + 500]))


def flat_params(config: TrainConfig) -> dict[str, str]:
    """A trial's MLflow params: its resolved config under the names a spec's axes use (worker.contract.
    grid.flat_config: the train fields, then every field of the resolved method, `lambda_s`, `epsilon`, ...;
    `method` stays the preset's name), as text."""
    return {
        key: json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else str(value)
        for key, value in flat_config(config).items()
    }


def log_params(client: MlflowClient, run_id: str, params: Mapping[str, str]) -> None:
    batch = [Param(k, v[:6000]) for k, v in params.items()]
    for i in range(0, len(batch), 100):
        retrying(partial(client.log_batch, run_id, params=batch[i : i + 100]))


def open_parent(
    client: MlflowClient,
    target: TrackingTarget,
    attempt: int,
    spec_hash: str,
    spec_json: str,
    params: Mapping[str, str],
) -> str:
    """The job's parent run, created on the first attempt and reopened (RUNNING) by later ones."""
    found = find_runs(client, target, kind="sweep")
    if found:
        run = found[0]
        recorded = run.data.tags.get(SPEC_HASH)
        if recorded and recorded != spec_hash:
            raise SpecMismatchError(
                f"job_id {target.job_id!r} already ran a different spec (hash {recorded[:12]}, this one "
                f"{spec_hash[:12]}); use a new job id"
            )
        run_id: str = run.info.run_id
        if run.info.status != "RUNNING":
            retrying(lambda: client.update_run(run_id, status="RUNNING"))
    else:
        tags = {JOB: target.job_id, KIND: "sweep", SPEC_HASH: spec_hash}
        run = retrying(lambda: client.create_run(target.experiment_id, run_name=target.job_id, tags=tags))
        run_id = run.info.run_id
        retrying(lambda: client.log_text(run_id, spec_json, "spec.json"))
        log_params(client, run_id, params)
    set_tags(client, run_id, {ATTEMPT: attempt})
    return run_id


def close_stale_children(client: MlflowClient, target: TrackingTarget, resuming: bool) -> list[str]:
    """Ends child runs a crashed attempt left RUNNING: KILLED and PENDING when the sweep resumes (the
    trial continues its run). Returns their trial ids.

    When there is no experiment to resume (a driver killed before Tune first wrote its state), the sweep
    starts over and its trials get new ids: the earlier attempt's trial runs are then the lineage of
    nothing. They are ended FAILED (`infra`) and moved to MLflow's trash (restorable there), so each trial
    of the sweep keeps exactly one run."""
    children = [r for r in find_runs(client, target) if TRIAL in r.data.tags]
    stale = [r for r in children if r.info.status == "RUNNING"]
    for run in stale if resuming else []:
        set_tags(client, run.info.run_id, {STATE: "PENDING"})
        retrying(partial(client.set_terminated, run.info.run_id, "KILLED"))
    for run in [] if resuming else children:
        if run.info.status == "RUNNING":
            finish_trial_run(client, run.info.run_id, "ERROR", "infra", "the sweep's driver stopped")
        set_tags(
            client, run.info.run_id, {"smartune.superseded": "the sweep started over: no state to resume"}
        )
        retrying(partial(client.delete_run, run.info.run_id))
    return [r.data.tags[TRIAL] for r in stale]


def trial_run(client: MlflowClient, target: TrackingTarget, trial_id: str) -> Run | None:
    found = find_runs(client, target, trial_id=trial_id)
    return min(found, key=lambda r: r.info.start_time) if found else None


def open_trial_run(
    client: MlflowClient,
    target: TrackingTarget,
    *,
    trial_id: str,
    parent_run_id: str,
    run_name: str,
    tags: Mapping[str, Any],
    params: Mapping[str, str],
) -> Run:
    """The trial's child run: found by its tags (a retry or a later attempt) or created with its params."""
    run = trial_run(client, target, trial_id)
    if run is None:
        base = {PARENT: parent_run_id, JOB: target.job_id, TRIAL: trial_id, STATE: "RUNNING"}
        run = retrying(
            lambda: client.create_run(
                target.experiment_id, run_name=run_name, tags={k: str(v) for k, v in {**base, **tags}.items()}
            )
        )
        log_params(client, run.info.run_id, params)
    elif run.info.status != "RUNNING":
        retrying(lambda: client.update_run(run.info.run_id, status="RUNNING"))
    return run


def clear_tags(client: MlflowClient, run: Run, keys: Iterable[str]) -> None:
    for key in keys:
        if key in run.data.tags:
            retrying(partial(client.delete_tag, run.info.run_id, key))


def finish_trial_run(
    client: MlflowClient, run_id: str, state: State, error_class: str | None = None, error: str | None = None
) -> None:
    """Records the trial's final state and ends its run: FINISHED, or FAILED with the error class."""
    tags: dict[str, Any] = {STATE: state}
    if state == "ERROR":
        tags[ERROR_CLASS] = error_class or "other"
        if error:
            tags[ERROR_MESSAGE] = error[-4000:]
    set_tags(client, run_id, tags)
    retrying(lambda: client.set_terminated(run_id, _FINAL_STATUS.get(state, "KILLED")))
