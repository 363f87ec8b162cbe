"""How each trial of a finished `Tuner.fit()` ended, reconciled with its MLflow child run.

The driver's callback records each trial's end as it happens; this pass repeats it from the result grid
once fit() returns (idempotent), so the runs are right even when a callback could not run (a restored
sweep, a tracking hiccup), and turns each trial into a `TrialOutcome` for the summary.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Run
from ray.tune import ResultGrid
from ray.tune.experiment import Trial

from worker.contract.errors import classify, reason
from worker.contract.grid import ResolvedTrial, cell_key
from worker.contract.spec import JobSpec
from worker.contract.tags import BEST_CHECKPOINT_URI, CELL, ERROR_CLASS, ERROR_MESSAGE, STATE, State
from worker.contract.tasks import get_task
from worker.tune.summary import TrialOutcome
from worker.tune.tracking import (
    TrackingTarget,
    finish_trial_run,
    flat_params,
    open_trial_run,
    trial_run,
)
from worker.tune.tuning import TrialResolver, trial_state


def main_metric_of(spec: JobSpec) -> str:
    """The main metric's name; with several tasks, `task:metric` pairs (each trial's `score` is its own);
    a custom function's `function.metric` when it names one."""
    if spec.function is not None and spec.function.metric:
        return spec.function.metric
    names = {task: get_task(task).main_metric for task in spec.tasks}
    if len(set(names.values())) == 1:
        return next(iter(names.values()))
    return ",".join(f"{task}:{metric}" for task, metric in names.items())


def record_final_state(
    client: MlflowClient,
    target: TrackingTarget,
    parent_run_id: str,
    trial_id: str,
    state: State,
    error: BaseException | None = None,
    error_text: str = "",
    trial: ResolvedTrial | None = None,
) -> Run | None:
    """Ends the trial's run with `state` unless it already says so; returns the run as it was."""
    run = trial_run(client, target, trial_id)
    if run is None:
        if state != "ERROR":
            return None
        # Failed before the trainable could open its run: a run made here, so the failure is on record
        # with the trial's params and cell as its own run would have them (worker.tune.trainable.open_run).
        run = open_trial_run(
            client,
            target,
            trial_id=trial_id,
            parent_run_id=parent_run_id,
            run_name=f"{trial_id} {trial.label} seed={trial.seed}"[:250] if trial else trial_id,
            tags={CELL: cell_key(trial.cell)} if trial else {},
            params=flat_params(trial.config) if trial else {},
        )
    if run.info.status != "RUNNING" and run.data.tags.get(STATE) == state:
        return run
    error_class = message = None
    if state == "ERROR":
        error_class = run.data.tags.get(ERROR_CLASS) or classify(error, error_text)
        run.data.tags[ERROR_CLASS] = error_class
        if ERROR_MESSAGE not in run.data.tags:  # keep the trial's own one-line message when it left one
            message = reason(error, error_text)  # one line: never a remote traceback
            run.data.tags[ERROR_MESSAGE] = message
    finish_trial_run(client, run.info.run_id, state, error_class, message)
    return run


_STAGES = {0: "joint", 1: "finetune"}  # worker.training.multitask_run.STAGE_CODES, read back


def task_results(metrics: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A multitask trial's per-task best (`tasks/<task>/best_score|best_stage|best_epoch`, flat or as
    Tune nests them) as task -> {value, stage, epoch}; empty for a single-task trial."""
    nested = metrics.get("tasks")
    flat: dict[str, Any] = {}
    if isinstance(nested, Mapping):
        flat = {f"tasks/{t}/{k}": v for t, values in nested.items() for k, v in dict(values).items()}
    flat |= {k: v for k, v in metrics.items() if k.startswith("tasks/")}
    out: dict[str, dict[str, Any]] = {}
    for key, value in flat.items():
        _, task, name = key.split("/", 2)
        entry = out.setdefault(task, {})
        if name == "best_score":
            entry["value"] = float(value)
        elif name == "best_stage":
            entry["stage"] = _STAGES.get(int(value), str(value))
        elif name == "best_epoch":
            entry["epoch"] = int(value)
    return out


def _trial_id(metrics: dict[str, Any], path: str | None) -> str:
    if metrics.get("trial_id"):
        return str(metrics["trial_id"])
    return Path(path or "").name.removeprefix("trial_")  # worker.tune.tuning.trial_name's folder


def collect_outcomes(
    results: ResultGrid,
    client: MlflowClient,
    target: TrackingTarget,
    parent_run_id: str,
    resolver: TrialResolver,
) -> list[TrialOutcome]:
    outcomes = []
    for index in range(len(results)):  # a ResultGrid is indexed, not typed as iterable
        result = results[index]
        metrics = dict(result.metrics or {})
        config = result.config or metrics.get("config") or {}
        done = int(metrics.get("epoch", 0) or 0)
        status = Trial.ERROR if result.error else (Trial.TERMINATED if done else Trial.PENDING)
        trial_id = _trial_id(metrics, result.path)
        trial = resolver(trial_id, config)
        state = trial_state(status, done, trial.planned_epochs)
        run = (
            record_final_state(client, target, parent_run_id, trial_id, state, result.error, trial=trial)
            if state != "PENDING"
            else trial_run(client, target, trial_id)
        )
        tags = run.data.tags if run is not None else {}
        outcomes.append(
            TrialOutcome(
                trial_id=trial_id,
                state=state,
                cell=trial.cell,
                seed=trial.seed,
                value=float(metrics["best_score"]) if "best_score" in metrics else None,
                epochs_done=done,
                run_id=run.info.run_id if run is not None else None,
                checkpoint_uri=tags.get(BEST_CHECKPOINT_URI),
                error_class=tags.get(ERROR_CLASS) if state == "ERROR" else None,
                error=tags.get(ERROR_MESSAGE) if state == "ERROR" else None,
                extra={"tasks": tasks} if (tasks := task_results(metrics)) else {},
            )
        )
    return sorted(outcomes, key=lambda o: o.trial_id)
