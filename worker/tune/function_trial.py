"""A custom-function trial in a sweep, and its audit's re-run (docs/custom_functions.md).

The trainable (worker.tune.trainable.train_trial) opens the trial's MLflow child run as for any trial and
hands over here when its job has a `function`: the function runs in a child process of the trial's, whose
environment lacks the worker node's secrets (worker.tune.function_process), seeded from the trial's seed,
with the driver's `SMARTUNE_DATA_ROOTS` as its data roots; each epoch it reports comes back to a reporter
here whose epochs go to the run's metrics and to Tune (with the function's checkpoint folder, if it gives
one). What the function raises ends the trial with class `user` (`UserFunctionError: <type>: <message>` on
the run); never the sweep.
Provenance: the trial's values, the function's entrypoint and the SHA-256 of its module's source file,
so an audit (worker.tune.audit) calls it again with the same values and compares every reported metric.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import torch
from mlflow import MlflowClient
from ray import tune

from worker.contract.errors import UserFunctionError, diagnose
from worker.contract.function import FunctionSpec
from worker.contract.tags import ERROR_ATTEMPT, ERROR_CLASS, ERROR_MESSAGE, PROVENANCE_PREFIX
from worker.contract.trial import TrainConfig
from worker.training.files import data_roots
from worker.training.provenance import environment
from worker.tune.checkpoints import writing
from worker.tune.function_process import run_in_child
from worker.tune.function_protocol import FunctionJob
from worker.tune.run_tags import config_json
from worker.tune.tracking import log_metrics, set_tags
from worker.tune.user_function import Reporter, one_line, user_config

# Provenance tags (under PROVENANCE_PREFIX) of a function trial, read back by its audit.
FUNCTION_TAG, METRIC_TAG, MODE_TAG = "function", "function_metric", "function_mode"
SOURCE_TAG, VALUES_TAG, METRICS_TAG = "function_source_sha256", "function_values", "function_metrics"


@dataclass(frozen=True)
class FunctionRun:
    """What every trial of a function job runs: the spec's `function`, its metric resolved."""

    entrypoint: str
    metric: str
    mode: str = "max"

    @classmethod
    def of(cls, spec: FunctionSpec, default_metric: str) -> FunctionRun:
        return cls(spec.entrypoint, spec.metric or default_metric, spec.mode)


def source_digest(entrypoint: str) -> str:
    """SHA-256 of the function's module file, or why there is none (a namespace or built-in module)."""
    found = importlib.util.find_spec(entrypoint.partition(":")[0])
    if found is None or not found.origin or not Path(found.origin).is_file():
        return "n/a (no source file)"
    return hashlib.sha256(Path(found.origin).read_bytes()).hexdigest()


def tune_send(metrics: dict[str, float], folder: Path | None) -> None:
    """The epoch to Tune, with the function's checkpoint folder when it gave one (Tune copies it)."""
    with writing(f"the epoch {int(metrics['epoch'])} checkpoint to the sweep's storage"):
        checkpoint = tune.Checkpoint.from_directory(str(folder)) if folder is not None else None
        tune.report(metrics, checkpoint=checkpoint)


def _roots() -> list[str]:
    return [str(p) for p in data_roots() or []]  # empty: this deployment confines no reads (unset)


def function_job(
    entrypoint: str, config: TrainConfig, own: Mapping[str, Any], checkpoint: Path | None, threads: int
) -> FunctionJob:
    """What the function's process runs for a trial (or an audit's re-run) of `config`."""
    return FunctionJob(
        entrypoint=entrypoint,
        config=json.loads(json.dumps(user_config(config, own), default=str)),  # plain JSON: it crosses a pipe
        roots=_roots(),
        checkpoint=str(checkpoint) if checkpoint is not None else None,
        seed=config.seed,
        deterministic=config.deterministic,
        threads=threads,
        path=[os.path.abspath(entry) for entry in sys.path],  # '' is the working directory, shared
    )


def run_function_trial(
    function: FunctionRun,
    config: TrainConfig,
    own: Mapping[str, Any],
    client: MlflowClient,
    run_id: str,
    attempt: int,
) -> None:
    """One trial of a function job, on its open MLflow run (see the module's text)."""
    device = torch.device("cuda" if ray.get_gpu_ids() and torch.cuda.is_available() else "cpu")
    tags = {f"{PROVENANCE_PREFIX}{k}": v for k, v in environment(device, config.deterministic).items()}
    tags |= {
        f"{PROVENANCE_PREFIX}seed": config.seed,
        f"{PROVENANCE_PREFIX}config": config_json(config),  # what an audit re-runs, with the values below
        f"{PROVENANCE_PREFIX}{FUNCTION_TAG}": function.entrypoint,
        f"{PROVENANCE_PREFIX}{METRIC_TAG}": function.metric,
        f"{PROVENANCE_PREFIX}{MODE_TAG}": function.mode,
        f"{PROVENANCE_PREFIX}{VALUES_TAG}": json.dumps(dict(own), sort_keys=True, default=str),
        f"{PROVENANCE_PREFIX}{SOURCE_TAG}": source_digest(function.entrypoint),
    }
    set_tags(client, run_id, tags)
    with tempfile.TemporaryDirectory() as restored_to:
        named = tune.get_checkpoint()
        checkpoint = Path(named.to_directory(restored_to)) if named is not None else None
        names: set[str] = set()

        def log(metrics: dict[str, float], epoch: int) -> None:
            log_metrics(client, run_id, metrics, step=epoch)
            if not set(metrics) <= names:  # the names an audit compares, as they appear
                names.update(metrics)
                set_tags(client, run_id, {f"{PROVENANCE_PREFIX}{METRICS_TAG}": json.dumps(sorted(names))})

        reporter = Reporter(function.metric, function.mode, tune_send, log, checkpoint)
        sys.stderr.write(f"function {function.entrypoint}: from epoch {reporter.epoch}\n")
        try:  # torch's threads as here: what `environment` recorded above
            job = function_job(function.entrypoint, config, own, checkpoint, torch.get_num_threads())
            run_in_child(job, reporter)
        except Exception as err:  # not BaseException: Tune stops a trial (ASHA) with SystemExit(0)
            error_class, message = diagnose(err)
            set_tags(
                client, run_id, {ERROR_CLASS: error_class, ERROR_MESSAGE: message, ERROR_ATTEMPT: attempt}
            )
            if isinstance(err, UserFunctionError):
                raise UserFunctionError(str(err)) from None  # the user's traceback is in the log above
            raise
        if reporter.epoch == 0:
            raise UserFunctionError(f"{function.entrypoint} returned without reporting an epoch")


def rerun_function(provenance: Mapping[str, str], config: TrainConfig) -> dict[int, dict[str, float]]:
    """An audit's re-run of a function trial: epoch -> the metrics it reports (`score` and `best_score`
    made as the trial made them). Raises UserFunctionError when the function cannot be loaded or fails."""
    own = json.loads(provenance.get(VALUES_TAG, "{}"))
    rerun: dict[int, dict[str, float]] = {}

    def log(metrics: dict[str, float], epoch: int) -> None:
        rerun[epoch] = dict(metrics)

    reporter = Reporter(provenance[METRIC_TAG], provenance.get(MODE_TAG, "max"), lambda _m, _f: None, log)
    threads = config.num_threads or torch.get_num_threads()  # the recorded threads (audit._rerun_config)
    run_in_child(function_job(provenance[FUNCTION_TAG], config, own, None, threads), reporter)
    return rerun


def audit_problem(provenance: Mapping[str, str]) -> str | None:
    """Why a function trial's re-run would not be comparable: its module's source changed or is gone."""
    then = provenance.get(SOURCE_TAG)
    try:
        now = source_digest(provenance[FUNCTION_TAG])
    except Exception as err:
        return f"function: cannot find {provenance[FUNCTION_TAG]}: {one_line(err)}"
    if now != then:
        return (
            f"function: {provenance[FUNCTION_TAG]}'s module now has sha256 {now}, the trial recorded {then}"
        )
    return None
