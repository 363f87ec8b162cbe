"""`smartune bench sweep`: what orchestration costs, and what ASHA saves.

1. Overhead: N trainings of the same size (seeds 1..N, `minilm-l6` on an RTE subset sized so that one
   training lasts at least `--min-seconds`), run (a) back to back in this process through the very code a
   trial runs (`worker.tune.trainable.run_trial`: MLflow child run, per-epoch metrics, best-checkpoint artifact,
   the full session state saved each epoch and copied into a storage folder keeping best and last, as Tune
   does) and (b) as a sweep (`worker.tune.sweep.run_sweep`, one trial at a time, each with all the CPUs).
   Reported: the wall-time ratio sweep / in-process (target <= 1.10), with and without Ray's start-up.
2. Early stopping: the same small grid (learning rates x seeds) as a full sweep and with ASHA; reported:
   the fraction of training compute saved (train seconds and epochs, from the MLflow runs) and the gap
   between the best value each found.
Not a test: numbers depend on the machine and on whatever else runs on it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from mlflow import MlflowClient

from worker.contract.grid import resolve
from worker.contract.spec import JobSpec
from worker.contract.trial import TrainConfig
from worker.tune.checkpoints import RestorePoint
from worker.tune.run_tags import start_tags
from worker.tune.settings import Settings
from worker.tune.sweep import connect_ray, run_sweep
from worker.tune.tracking import (
    TrackingTarget,
    ensure_experiment,
    find_runs,
    finish_trial_run,
    open_parent,
    set_tags,
)
from worker.tune.trainable import TrialContext, open_run, run_trial
from worker.tune.tuning import KEPT_CHECKPOINTS, cell_axes, trial_configs


def _document(
    args: argparse.Namespace, *, samples: int, seeds: list[int], cpus: float, **extra: Any
) -> dict[str, Any]:
    return {
        "task": args.task,
        "data": args.data,
        "model": args.model,
        "method": args.method,
        "training": {
            "epochs": args.epochs,
            "batch_size": args.batch_size,
            "max_seq_length": args.seq_len,
            "max_train_samples": samples,
            "max_eval_samples": args.eval_samples,
            "learning_rate": 3e-5,
        },  # fmt: skip
        "seeds": seeds,
        "resources": {"cpus": cpus},
        "limits": {"max_concurrent_trials": 1, "max_retries": 0},
        **extra,
    }


def calibrate(args: argparse.Namespace, cpus: int) -> dict[str, float]:
    """Seconds per training example (after warm-up) -> the training-set size for `--min-seconds`."""
    from worker.training.loop import evaluate, train_epoch
    from worker.training.session import TrainingSession

    probe = trial_configs(
        JobSpec.model_validate(_document(args, samples=args.probe_samples, seeds=[1], cpus=cpus)), cpus
    )
    session = TrainingSession.build(TrainConfig.from_dict(probe[0]))
    train_epoch(session)  # warm-up: allocator, kernels, lazy optimiser state
    tick = time.perf_counter()
    train_epoch(session)
    per_example = (time.perf_counter() - tick) / len(session.train)
    tick = time.perf_counter()
    evaluate(session)
    eval_s = time.perf_counter() - tick
    budget = args.min_seconds / args.epochs - eval_s  # seconds of training per epoch
    samples = max(args.probe_samples, math.ceil(budget / per_example))
    return {"s_per_example": per_example, "eval_s": eval_s, "train_samples": float(samples)}


class StorageReporter:
    """What Tune does with a reported checkpoint: copy the folder into storage, keep the last two."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.kept: list[Path] = []

    def __call__(self, metrics: dict[str, float], state: Path) -> None:
        target = self.folder / f"checkpoint_{len(list(self.folder.glob('checkpoint_*'))):06d}"
        shutil.copytree(state, target)
        self.kept.append(target)
        for path in self.kept[:-KEPT_CHECKPOINTS]:
            if path.exists():
                shutil.rmtree(path)


def in_process(spec: JobSpec, settings: Settings, job_id: str) -> list[float]:
    """The sweep's trainings back to back in this process, tracked and checkpointed the same way."""
    client = MlflowClient(settings.tracking_uri)
    target = TrackingTarget(
        settings.tracking_uri, ensure_experiment(client, settings.experiment, settings.artifact_root), job_id
    )
    parent = open_parent(
        client, target, 1, spec.spec_hash(), spec.canonical_json(), {"kind": "in-process baseline"}
    )
    context = TrialContext(target, parent, 1, cell_axes(spec))
    walls = []
    for i, trial in enumerate(trial_configs(spec, spec.resources.cpus)):
        tick = time.perf_counter()
        trial_id = f"inproc_{i:05d}"
        resolved = resolve(trial, None, context.cell_axes)
        client, run = open_run(context, trial_id, resolved)
        set_tags(
            client, run.info.run_id, start_tags(run, 1, RestorePoint(None), {"CPU": spec.resources.cpus}, [])
        )
        storage = Path(settings.experiment_path(job_id)) / trial_id
        storage.mkdir(parents=True, exist_ok=True)
        run_trial(resolved.config, client, run, RestorePoint(None), StorageReporter(storage))
        finish_trial_run(client, run.info.run_id, "TERMINATED")
        walls.append(time.perf_counter() - tick)
    client.set_terminated(parent, "FINISHED")
    return walls


def compute(settings: Settings, job_id: str) -> dict[str, float]:
    """Training compute of a job from its MLflow runs: train seconds and epochs over all trials."""
    client = MlflowClient(settings.tracking_uri)
    experiment = client.get_experiment_by_name(settings.experiment)
    assert experiment is not None
    target = TrackingTarget(settings.tracking_uri, experiment.experiment_id, job_id)
    seconds = epochs = 0.0
    for run in find_runs(client, target):
        if "smartune.trial_id" in run.data.tags:
            points = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "train_seconds")}
            seconds, epochs = seconds + sum(points.values()), epochs + len(points)
    return {"train_seconds": seconds, "epochs": epochs}


def overhead(args: argparse.Namespace, settings: Settings, stamp: str) -> dict[str, Any]:
    cpus = os.cpu_count() or 1
    size = calibrate(args, cpus)
    spec = JobSpec.model_validate(
        _document(
            args, samples=int(size["train_samples"]), seeds=list(range(1, args.trainings + 1)), cpus=cpus
        )
    )
    walls = in_process(spec, settings, f"bench-inproc-{stamp}")
    baseline_s = sum(walls)
    tick = time.perf_counter()
    connect_ray()
    ray_start_s = time.perf_counter() - tick
    tick = time.perf_counter()
    summary = run_sweep(spec, job_id=f"bench-sweep-{stamp}", settings=settings)
    sweep_s = time.perf_counter() - tick
    ratio = sweep_s / baseline_s
    return {
        "trainings": args.trainings, "epochs": args.epochs, "train_samples": int(size["train_samples"]),
        "calibration": size, "in_process_s": baseline_s, "in_process_per_training_s": walls,
        "min_training_s": min(walls), "trainings_long_enough": min(walls) >= args.min_seconds, "sweep_s": sweep_s, "ray_start_s": ray_start_s, "ratio": ratio,
        "ratio_with_ray_start": (sweep_s + ray_start_s) / baseline_s,
        "sweep_trials": summary["trials_by_state"],
        "target": {"value": ratio, "target": "<= 1.1", "met": ratio <= 1.10},
    }  # fmt: skip


def early_stopping(args: argparse.Namespace, settings: Settings, stamp: str) -> dict[str, Any]:
    connect_ray()
    lrs = [float(v) for v in args.asha_lrs.split(",")]
    seeds = list(range(1, args.asha_seeds + 1))
    base = _document(args, samples=args.asha_samples, seeds=seeds, cpus=args.asha_cpus,
                     search_space={"axes": {"learning_rate": {"values": lrs}}})  # fmt: skip
    base["limits"]["max_concurrent_trials"] = args.asha_concurrency
    asha = {**base, "search": {"asha": {"grace_period": 1, "reduction_factor": args.asha_reduction}}}
    results: dict[str, Any] = {}
    for name, document in (("full", base), ("asha", asha)):
        job_id = f"bench-{name}-{stamp}"
        tick = time.perf_counter()
        summary = run_sweep(JobSpec.model_validate(document), job_id=job_id, settings=settings)
        best = summary["best"]["value"] if summary["best"] else None
        results[name] = {"wall_s": time.perf_counter() - tick, "best": best, "trials": summary["trials_by_state"],
                         **compute(settings, job_id)}  # fmt: skip
    full, stopped = results["full"], results["asha"]
    return {
        **results,
        "grid": {
            "learning_rate": lrs,
            "seeds": seeds,
            "epochs": args.epochs,
            "train_samples": args.asha_samples,
        },
        "compute_saved": 1 - stopped["train_seconds"] / full["train_seconds"],
        "epochs_saved": 1 - stopped["epochs"] / full["epochs"],
        "best_gap": None
        if full["best"] is None or stopped["best"] is None
        else full["best"] - stopped["best"],
    }


def main(args: argparse.Namespace) -> int:
    """Entry point of `smartune bench sweep`: one JSON object on stdout."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    data_dir = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="smartune-bench-"))
    settings = Settings.from_env({"SMARTUNE_DATA_DIR": str(data_dir)})
    settings.prepare()
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_avg": os.getloadavg()},
        "model": args.model, "task": args.task, "method": args.method, "data_dir": str(data_dir),
    }  # fmt: skip
    if not args.skip_overhead:
        result["overhead"] = overhead(args, settings, stamp)
    if not args.skip_asha:
        result["early_stopping"] = early_stopping(args, settings, stamp)
    result["machine"]["load_avg_after"] = os.getloadavg()
    print(json.dumps(result, indent=2, default=str))
    return 0
