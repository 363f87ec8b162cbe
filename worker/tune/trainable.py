"""The Ray Tune trainable: one trial is one fine-tuning run, reported to Tune and to its MLflow child run.

The only place (with the driver's callbacks) that talks to Tune and MLflow; the training itself is
`worker.training.finetune.run_training`. After every epoch the trial logs the epoch's metrics to its run, logs
the model as the run's `best_checkpoint` artifact when the epoch is the best so far, and reports to Tune
with a checkpoint of the whole `TrainingSession` state (weights, optimiser, scheduler, momentum teacher,
position, RNG states, running sums) plus the epoch history (worker.tune.epoch_report shapes the metrics and
writes the checkpoint). A retried or resumed trial restores that state, continues its own MLflow run, and
ends exactly where an uninterrupted run ends (on CPU).
The run also gets its training data as a dataset input and the node's system metrics while it trains
(worker.tune.telemetry), and, once the last epoch is done, the best checkpoint as a transformers-flavour
MLflow model (worker.tune.registry). What the trial prints is kept on its run too, the last 256 KiB of each
start (worker.tune.trial_output): Ray's log of the driver cannot tell whose a line is.
On a GPU the trial logs what it holds (`gpu_fraction`, `gpu_memory_reserved_mb`) at each start, its peak
allocated memory (`gpu_memory_peak_mb`) with every epoch and, when it runs out of memory, what it held then
(`gpu_memory_oom_peak_mb`) before it fails: the control plane corrects its memory estimate with them
(service.costs.refresh.memory_peaks; docs/memory_packing.md).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import ray
import torch
from mlflow import MlflowClient
from mlflow.entities import Run
from ray import tune
from transformers.utils import logging as hf_logging

from worker.contract.errors import NON_RETRYABLE, RepeatedFailure, diagnose
from worker.contract.function import own_values
from worker.contract.grid import ResolvedTrial, cell_key
from worker.contract.multitask import PLAN_KEY, MultitaskPlan
from worker.contract.tags import (
    ATTEMPT,
    CELL,
    ERROR_ATTEMPT,
    ERROR_CLASS,
    ERROR_MESSAGE,
    MODEL_URI,
    STARTS,
)
from worker.contract.trial import TrainConfig
from worker.training.finetune import RunCallbacks, best_record, run_training, save_checkpoint
from worker.training.models import model_digest
from worker.training.parallel import data_parallel
from worker.training.prepared import PreparedData, data_key
from worker.training.session import TrainingSession
from worker.tune.best_model import log_best_checkpoint, log_model
from worker.tune.checkpoints import RestorePoint, restore_point, trial_folder
from worker.tune.epoch_report import (
    PEAK_METRIC,
    Reporter,
    epoch_metrics,
    gpu_peak,
    report_state,
    tune_reporter,
)
from worker.tune.function_trial import FunctionRun, run_function_trial
from worker.tune.multitask_trial import run_multitask_trial
from worker.tune.run_tags import provenance_tags, start_tags
from worker.tune.startup_clock import process_age_s
from worker.tune.telemetry import DEFAULT_INTERVAL, log_training_data, system_metrics
from worker.tune.tracking import (
    TrackingTarget,
    clear_tags,
    flat_params,
    log_metrics,
    open_trial_run,
    set_tags,
)
from worker.tune.trial_output import kept_output
from worker.tune.tuning import resolve_trial, trial_dir_name

_ERROR_TAGS = (ERROR_CLASS, ERROR_MESSAGE, ERROR_ATTEMPT)
OOM_PEAK_METRIC = "gpu_memory_oom_peak_mb"  # PEAK_METRIC's value when an allocation failed (a lower bound)
_first_trial = True  # this process has run no trial yet (Tune reuses a trial's process for the next)


@dataclass(frozen=True)
class TrialContext:
    """What every trial of one job attempt shares; re-specified on each attempt (Tuner.restore)."""

    target: TrackingTarget
    parent_run_id: str
    attempt: int
    cell_axes: tuple[str, ...]
    experiment_path: str | None = None  # the sweep's Tune storage folder: where a trial finds its checkpoints
    # The driver's data confinement (`SMARTUNE_DATA_ROOTS`, ...), set in the trial's process before it reads.
    environment: tuple[tuple[str, str], ...] = ()
    system_metrics_interval: float = DEFAULT_INTERVAL  # seconds between system-metric points; 0: none
    function: FunctionRun | None = None  # a function job's: what its trials run (worker.tune.function_trial)


def _refuse_repeated_failure(client: MlflowClient, run: Run, attempt: int) -> None:
    """Within one job attempt, a `nan` or `data` failure would only repeat: fail at once, keep the tags."""
    tags = run.data.tags
    if tags.get(ERROR_ATTEMPT) == str(attempt) and tags.get(ERROR_CLASS) in NON_RETRYABLE:
        raise RepeatedFailure(tags[ERROR_CLASS], tags.get(ERROR_MESSAGE, ""))  # type: ignore[arg-type]
    clear_tags(client, run, _ERROR_TAGS)


def run_trial(
    config: TrainConfig,
    client: MlflowClient,
    run: Run,
    restored: RestorePoint,
    report: Reporter = tune_reporter,
    data: PreparedData | None = None,
) -> None:
    """Trains one trial to its last epoch: its training data as a dataset input, MLflow metrics and best
    checkpoint per epoch, `report` with the full session state (what a retry restores; outside Tune,
    `report` stores it elsewhere), and at the end the best checkpoint as a transformers-flavour model.
    `data`: the trial's data as its sweep prepared it (else the session reads and tokenises it)."""
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # no "Writing model shards" bars in the job log
    state = restored.state["session"] if restored.state is not None else None
    # With `workers` > 1 the other ranks train beside this process (rank 0), which alone reports.
    with data_parallel(config, state, data) as ranks:
        started = time.perf_counter()
        session = TrainingSession.build(config, ranks, data)
        log_metrics(client, run.info.run_id, {"setup_seconds": time.perf_counter() - started}, step=0)
        _run_rank0(config, client, run, restored, report, session, data)


def _run_rank0(
    config: TrainConfig,
    client: MlflowClient,
    run: Run,
    restored: RestorePoint,
    report: Reporter,
    session: TrainingSession,
    data: PreparedData | None,
) -> None:
    run_id = run.info.run_id
    set_tags(client, run_id, provenance_tags(session, config, model_digest(session.model)))
    log_training_data(client, run_id, config, session.task, data.train_examples if data else None)
    history: list[dict[str, Any]] = []
    if restored.state is not None:
        session.load_state_dict(restored.state["session"])
        history = list(restored.state["history"])
    epochs_before = len(history)
    main = session.task.main_metric
    best = best_record(history, main)  # the epoch chosen so far (on validation rows, else on dev)
    if restored.substituted and best is not None:
        # Tune's view of this trial is older than the state it resumes from: report the last epoch
        # again, so its results, scheduler and next checkpoint agree with the training (even when the
        # state is the last epoch's and nothing is left to train).
        report_state(report, epoch_metrics(history[-1], main, best), restored.state or {})

    def on_epoch_end(session: TrainingSession, record: dict[str, Any], is_best: bool) -> None:
        nonlocal best
        history.append(record)
        chosen = best = record if is_best or best is None else best
        metrics = epoch_metrics(record, main, chosen) | gpu_peak()
        # Metrics before the checkpoint: a kill in between re-logs the same values after the exact resume.
        log_metrics(client, run_id, metrics, step=record["epoch"])
        if is_best:
            log_best_checkpoint(client, run_id, run.info.artifact_uri, record["epoch"], record["metrics"],
                                lambda folder: save_checkpoint(session, folder))  # fmt: skip
        report_state(report, metrics, {"session": session.state_dict(), "history": history})

    result = run_training(config, None, RunCallbacks(on_epoch_end=on_epoch_end), session, list(history))
    final = {
        "best_epoch": float(result["best_epoch"]),
        "nonfinite_skips": float(result["nonfinite_skips"]),
        "mean_examples_per_s": float(result["examples_per_s"]),
    }
    log_metrics(client, run_id, final, step=len(result["epochs"]))
    # Once per trial, at its end: the best checkpoint as an MLflow model. A restart that trained nothing
    # more (its last epoch was already done) logs it only if the earlier start did not get that far.
    if len(result["epochs"]) > epochs_before or MODEL_URI not in client.get_run(run_id).data.tags:
        log_model(client, run_id)


def open_run(
    context: TrialContext,
    trial_id: str,
    trial: ResolvedTrial,
    plan: MultitaskPlan | None = None,
    own: Mapping[str, Any] | None = None,
) -> tuple[MlflowClient, Run]:
    """The trial's child run (found again on a retry, else created with the resolved config as params;
    a multitask trial's `task` param lists its tasks, beside `multitask_sampling` and `finetune_epochs`;
    a function trial's own axes' values are params too)."""
    client = context.target.client()
    params = flat_params(trial.config) | {k: str(v)[:6000] for k, v in (own or {}).items()}
    if plan is not None:
        params |= {"task": ",".join(plan.tasks), "multitask_sampling": plan.sampling,
                   "finetune_epochs": str(plan.finetune_epochs)}  # fmt: skip
    run = open_trial_run(
        client,
        context.target,
        trial_id=trial_id,
        parent_run_id=context.parent_run_id,
        run_name=f"{trial_id} {trial.label} seed={trial.seed}".replace("  ", " ")[:250],
        tags={ATTEMPT: context.attempt, CELL: cell_key(trial.cell)},
        params=params,
    )
    return client, run


def train_trial(
    config: dict[str, Any], context: TrialContext, shared_data: Mapping[str, Any] | None = None
) -> None:
    """Tune's function trainable (bind `context` and `shared_data` with `tune.with_parameters`).

    `shared_data` maps a `data_key` to the object-store reference of its PreparedData (worker.tune.
    shared_data): a trial whose key is there fetches its data instead of reading and tokenising it.
    The first trial of a process logs `worker_start_seconds` at step 0 (worker.tune.startup_clock)."""
    global _first_trial
    age, first = process_age_s(), _first_trial
    _first_trial = False
    os.environ.update(dict(context.environment))  # before anything is read: confined like the driver
    logging.getLogger("ray.train").setLevel(logging.WARNING)  # no "Checkpoint created" line per epoch
    tune_context = tune.get_context()
    trial = resolve_trial(config, context.cell_axes)
    plan = MultitaskPlan.from_dict(config[PLAN_KEY]) if config.get(PLAN_KEY) else None
    own = own_values(config)  # a custom function's own axes' values ({} for other jobs)
    client, run = open_run(context, tune_context.get_trial_id(), trial, plan, own)
    folder = None
    if context.experiment_path is not None:
        folder = trial_folder(context.experiment_path, trial_dir_name(tune_context.get_trial_id()))
    # A function's checkpoints are its own folders (worker.tune.function_trial restores them itself).
    restored = (
        restore_point(tune.get_checkpoint(), folder) if context.function is None else RestorePoint(None)
    )
    resources = tune_context.get_trial_resources().required_resources
    started = start_tags(run, context.attempt, restored, resources, ray.get_gpu_ids())
    set_tags(client, run.info.run_id, started)
    if first and age is not None:  # Ray's start of the process, the trainable's imports
        log_metrics(client, run.info.run_id, {"worker_start_seconds": age}, step=0)
    with kept_output(client, run.info.run_id, int(started[STARTS])):
        # The first line of the trial's own log (and, prefixed by Ray with the actor's pid, of the driver's).
        # stderr, as the driver's table: the driver's stdout carries only its summary.
        sys.stderr.write(
            f"trial {tune_context.get_trial_id()}: start {started[STARTS]} in attempt {context.attempt}, "
            f"{trial.label or 'one cell'}, seed {trial.seed}, {trial.planned_epochs} epochs, "
            f"from epoch {restored.epochs_done}\n"
        )
        sys.stderr.flush()
        if context.function is not None:
            _refuse_repeated_failure(client, run, context.attempt)  # a `user` failure repeats likewise
            run_function_trial(context.function, trial.config, own, client, run.info.run_id, context.attempt)
        else:
            _train(context, client, run, trial, plan, restored, resources, shared_data)


def _train(
    context: TrialContext,
    client: MlflowClient,
    run: Run,
    trial: ResolvedTrial,
    plan: MultitaskPlan | None,
    restored: RestorePoint,
    resources: Mapping[str, float],
    shared_data: Mapping[str, Any] | None,
) -> None:
    if resources.get("GPU"):  # what this start holds, for the pool page (service/dashboard/memory.py)
        held = {"gpu_fraction": resources["GPU"], "gpu_memory_reserved_mb": resources.get("gpu_memory_mb")}
        log_metrics(client, run.info.run_id, {k: float(v) for k, v in held.items() if v}, step=0)
    _refuse_repeated_failure(client, run, context.attempt)  # after counting the start
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # a reused actor ran trials before
        torch.cuda.reset_peak_memory_stats()
    with system_metrics(run.info.run_id, context.target.tracking_uri, context.system_metrics_interval):
        try:
            if plan is not None:
                keys = {task: data_key(replace(trial.config, task=task)) for task in plan.tasks}
                prepared = {
                    t: ray.get(shared_data[k]) for t, k in keys.items() if shared_data and k in shared_data
                }
                job_id = context.target.job_id
                run_multitask_trial(
                    trial.config, plan, client, run, job_id, restored, tune_reporter, prepared
                )
            else:
                key = data_key(trial.config)
                data = ray.get(shared_data[key]) if shared_data and key in shared_data else None
                run_trial(trial.config, client, run, restored, data=data)
        except Exception as err:  # not BaseException: Tune stops a trial (ASHA) with SystemExit(0)
            error_class, message = diagnose(err)  # here, where the process's own state can still tell
            if error_class == "oom" and (peak := gpu_peak()):  # what it held when an allocation failed
                log_metrics(client, run.info.run_id, {OOM_PEAK_METRIC: peak[PEAK_METRIC]}, step=0)
            set_tags(
                client,
                run.info.run_id,
                {ERROR_CLASS: error_class, ERROR_MESSAGE: message, ERROR_ATTEMPT: context.attempt},
            )
            raise
