"""A multitask trial (MT-DNN-SMART) in Tune and MLflow: one trial run, one nested run per task under it.

The training is worker.training.multitask_run; this module records it. After each epoch unit (a joint
epoch, or one fine-tuning epoch of one task):
- each task's nested run (tags `mlflow.parentRunId` = the trial's run, `smartune.kind` = "task",
  `smartune.task`; no `smartune.trial_id`, so it is never taken for a trial) gets that task's dev metrics:
  joint-stage epochs as `mt_score`, `mt_eval_*`, `mt_train_loss`, `mt_train_*` at step = joint epoch;
  fine-tuning epochs as `score`, `eval_*`, `train_loss`, `train_*` at step = fine-tuning epoch; and its
  best so far as `best_score` with the tags `smartune.best_stage` / `smartune.best_epoch`;
- the trial's run gets `epoch` (the unit), `score` (the mean over tasks of each task's latest dev score),
  `best_score` (the mean of each task's best) and `tasks/<task>/best_score|best_stage|best_epoch`, at
  step = unit, and Tune gets the same with a checkpoint of the whole state: a retried trial resumes at
  its last unit, exactly (CPU);
- a task whose dev score beat its best so far gets its model as it stands (the shared encoder and its
  head in the joint stage, its fine-tuned copy after) as its run's `best_checkpoint`
  (worker.tune.best_model); once the trial has trained to its end, each task's run logs that checkpoint
  as an MLflow model. At the end of the sweep, each task's best model over the trials becomes this job's
  version of the team's `smartune-<team>-<task>` (`register_task_bests`, worker.tune.registration).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from functools import partial
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Run

from worker.contract.model_registry import ALIAS, registered_model_name
from worker.contract.multitask import MultitaskPlan
from worker.contract.tags import BEST_EPOCH, JOB, KIND, MODEL_URI, PARENT
from worker.contract.tasks import get_task
from worker.contract.trial import TrainConfig
from worker.training.multitask_run import STAGE_CODES, ModelWriter, Unit, run_multitask, task_bests
from worker.training.prepared import PreparedData
from worker.tune.best_model import log_best_checkpoint, log_model
from worker.tune.checkpoints import RestorePoint
from worker.tune.epoch_report import Reporter, report_state  # the same writing as a single-task trial
from worker.tune.registration import register_best
from worker.tune.tracking import log_metrics, log_params, retrying, set_tags

TASK_TAG = "smartune.task"  # on a nested task run: the task it records
BEST_STAGE = "smartune.best_stage"  # on a nested task run: "joint" or "finetune"
TASK_KIND = "task"


def task_runs_of(client: MlflowClient, experiment_id: str, trial_run_id: str) -> dict[str, Run]:
    """task -> the nested task run under the trial's run `trial_run_id`, as far as they exist."""
    found = retrying(
        lambda: client.search_runs(
            [experiment_id], f"tags.`{PARENT}` = '{trial_run_id}' and tags.`{KIND}` = '{TASK_KIND}'"
        )
    )
    return {r.data.tags[TASK_TAG]: r for r in found if TASK_TAG in r.data.tags}


def open_task_runs(client: MlflowClient, run: Run, job_id: str, tasks: tuple[str, ...]) -> dict[str, str]:
    """task -> run id of its nested run under the trial's `run` (found again on a retry, else created)."""
    trial_id = run.info.run_id
    found = task_runs_of(client, run.info.experiment_id, trial_id)
    out = {task: found_run.info.run_id for task, found_run in found.items()}
    for task in tasks:
        if task in out:
            retrying(partial(client.update_run, out[task], status="RUNNING"))
            continue
        tags = {PARENT: trial_id, JOB: job_id, KIND: TASK_KIND, TASK_TAG: task}
        run_name = f"{run.info.run_name} {task}"[:250]
        created = retrying(partial(client.create_run, run.info.experiment_id, run_name=run_name, tags=tags))
        out[task] = created.info.run_id
        carried = {k: run.data.params[k] for k in ("model", "method") if k in run.data.params}
        log_params(client, created.info.run_id, {"task": task} | carried)  # what the model card names
    return out


def task_metrics(unit: Unit, record: Mapping[str, Any]) -> dict[str, float]:
    """One task's epoch record as metrics, prefixed `mt_` in the joint stage."""
    prefix = "mt_" if unit["stage"] == "joint" else ""
    main = record["main_metric"]
    out = {
        f"{prefix}score": float(record["metrics"][main]),
        f"{prefix}train_loss": float(record["train_loss"]),
    }
    out |= {f"{prefix}eval_{k}": float(v) for k, v in record["metrics"].items()}
    out |= {f"{prefix}train_{k}": float(v) for k, v in record["components"].items() if k != "loss"}
    return out


def trial_metrics(history: list[Unit], plan: MultitaskPlan) -> dict[str, float]:
    """What the trial's run and Tune see after the last unit of `history`."""
    latest: dict[str, float] = {}
    for unit in history:
        for name, record in unit["records"].items():
            latest[name] = float(record["metrics"][record["main_metric"]])
    bests = task_bests(history, plan)
    out = {
        "epoch": float(history[-1]["unit"]),
        "stage": float(STAGE_CODES[history[-1]["stage"]]),
        "score": statistics.fmean(latest.values()),
        "best_score": statistics.fmean(b["value"] for b in bests.values()),
    }
    for name, best in bests.items():
        out |= {f"tasks/{name}/best_score": best["value"], f"tasks/{name}/best_stage": float(STAGE_CODES[best["stage"]]),
                f"tasks/{name}/best_epoch": float(best["epoch"])}  # fmt: skip
    return out


def run_multitask_trial(
    config: TrainConfig,
    plan: MultitaskPlan,
    client: MlflowClient,
    run: Run,
    job_id: str,
    restored: RestorePoint,
    report: Reporter,
    data: dict[str, PreparedData] | None = None,
) -> None:
    task_runs = open_task_runs(client, run, job_id, plan.tasks)
    artifact_uris = {name: retrying(partial(client.get_run, run_id)).info.artifact_uri
                     for name, run_id in task_runs.items()}  # fmt: skip
    state = restored.state
    if state is not None and restored.substituted and state["history"]:
        report_state(report, trial_metrics(state["history"], plan), state)
    trained = False

    def on_unit(unit: Unit, resumable: Any, write: ModelWriter) -> None:
        nonlocal trained
        trained = True
        current = resumable()
        history = current["history"]
        for name, record in unit["records"].items():
            log_metrics(client, task_runs[name], task_metrics(unit, record), step=unit["epoch"])
        bests = task_bests(history, plan)
        for name, record in unit["records"].items():
            best = bests[name]
            log_metrics(client, task_runs[name], {"best_score": best["value"]}, step=unit["unit"])
            if best["unit"] == unit["unit"]:  # this unit is the task's best so far: keep its model
                log_best_checkpoint(client, task_runs[name], artifact_uris[name], best["epoch"],
                                    record["metrics"], partial(write, name))  # fmt: skip
            set_tags(client, task_runs[name], {BEST_STAGE: best["stage"], BEST_EPOCH: best["epoch"]})
        metrics = trial_metrics(history, plan)
        log_metrics(client, run.info.run_id, metrics, step=unit["unit"])
        report_state(report, metrics, current)

    run_multitask(config, plan, on_unit, state, data)
    for run_id in task_runs.values():
        # Once per trial, at its end (a restart that trained nothing more: only if not logged before).
        if trained or MODEL_URI not in retrying(partial(client.get_run, run_id)).data.tags:
            log_model(client, run_id)
        retrying(partial(client.set_terminated, run_id, "FINISHED"))


def register_task_bests(
    client: MlflowClient,
    team: str,
    job_id: str,
    spec_hash: str,
    experiment_id: str,
    tasks: Mapping[str, dict[str, Any]],
) -> None:
    """Each task's best model over the trials (the summary's `tasks`: task -> its best trial's `run_id`,
    `trial_id`, ...) registered as this job's version of `smartune-<team>-<task>`; each entry gets the
    outcome as `registered_model` (with `error` when it failed). Never raises."""
    for task, result in tasks.items():
        name = registered_model_name(team, task)
        try:
            task_run = task_runs_of(client, experiment_id, str(result["run_id"])).get(task)
        except Exception as err:  # the store is down: the registration fails, not the sweep
            result["registered_model"] = {"name": name, "alias": ALIAS, "version": None,
                                          "error": f"{type(err).__name__}: {err}"[:1000]}  # fmt: skip
            continue
        if task_run is None:
            result["registered_model"] = {"name": name, "alias": ALIAS, "version": None,
                                          "error": f"the best trial has no run for {task}"}  # fmt: skip
            continue
        best = {"run_id": task_run.info.run_id, "trial_id": result.get("trial_id")}
        result["registered_model"] = register_best(
            client, team=team, task=task, job_id=job_id, spec_hash=spec_hash, best=best,
            main_metric=get_task(task).main_metric,
        )  # fmt: skip
