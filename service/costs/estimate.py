"""The plan of a valid spec: its trials, what each trains and evaluates, and the device-hours they take.

A trial's seconds = its overhead (start, model load, tokenising, MLflow; per model in the calibration) +
epochs x (training examples x seconds per training example + evaluated examples x seconds per evaluated
example), from the calibration table (service.costs.calibration) at the trial's model, method,
max_seq_length and device. Device-hours = trial seconds x the units a trial reserves (its GPUs when it
asks for any: GPU-hours; else its CPUs: CPU-hours) / 3600, summed over trials. Wall time: the trials laid
out, longest first, on the slots the job may run at once (its max_concurrent_trials within the pool and
the team's quota). ASHA's saving is an expectation (service.costs.asha) shown beside the full figure, which
is what a budget is charged with. Sampled (random) axes are costed at the spec's base value.

A job with GPUs also gets its trials' accelerator memory (service.costs.memory): per group the estimate,
and for the job the figure every trial reserves (the spec's `resources.gpu_memory_mb`, else the largest
estimate, which submission pins into the spec), with the GPU fraction it packs to and the trials per GPU
on the deployment's GPU kind (SMARTUNE_GPU_KIND; unknown: the worker packs by what the nodes advertise).
Device-hours are charged at the spec's `gpus`, as the job store records it.
"""

from __future__ import annotations

import heapq
from typing import Any

from service.config import Settings
from service.costs import asha
from service.costs import memory as gpu_memory
from service.costs.calibration import ANY_GPU, Calibration
from service.costs.sizes import Uploaded, eval_examples, train_examples
from service.engine.pool import concurrency
from service.engine.scheduler import Resources
from service.store.models import Team
from service.validation import quotas
from worker.contract.spec import JobSpec

# What makes two trials cost the same.
COST_FIELDS = ("task", "model", "method", "max_seq_length", "epochs", "batch_size", "max_train_samples",
               "max_eval_samples", "train_fraction", "validation_fraction", "data", "workers", "precision",
               "optimizer")  # fmt: skip


def device_of(spec: JobSpec, settings: Settings) -> tuple[str, str, float]:
    """(device kind, unit, units per trial): a trial with GPUs is charged its GPUs, else its CPUs."""
    if spec.resources.gpus > 0:
        return settings.gpu_kind or ANY_GPU, "gpu-hours", spec.resources.gpus
    return "cpu", "cpu-hours", spec.resources.cpus


def _group(
    trial: dict[str, Any],
    count: int,
    spec: JobSpec,
    settings: Settings,
    calibration: Calibration,
    table: gpu_memory.MemoryTable,
    uploaded: Uploaded | None,
) -> dict[str, Any]:
    device, _unit, _units = device_of(spec, settings)
    train = train_examples(trial["task"], trial["data"], settings.glue_dir, trial["max_train_samples"],
                           trial["train_fraction"], trial["validation_fraction"], uploaded)  # fmt: skip
    evals = eval_examples(
        trial["task"], trial["data"], settings.glue_dir, trial["max_eval_samples"], uploaded
    )
    match = calibration.lookup(trial["model"], trial["method"], trial["max_seq_length"], device)
    out: dict[str, Any] = {
        "trials": count,
        **{k: trial[k] for k in ("task", "model", "method", "max_seq_length", "epochs", "batch_size")},
        "train_examples": train.rows,
        "train_examples_basis": train.basis,
        "eval_examples": evals.rows,
        "eval_examples_basis": evals.basis,
        "calibration": None,
        "seconds_per_trial": None,
        "seconds_per_epoch": None,
        "unknown": None,
        "memory": None,
    }
    if spec.resources.gpus > 0:
        found = gpu_memory.trial_estimate(spec, trial, gpu_kind=settings.gpu_kind, table=table)
        out["memory"] = found.describe()
    if spec.function is not None:  # the user's function: its declared time, or unknown (admitted, counted)
        minutes = spec.function.max_minutes
        out["seconds_per_trial"] = minutes * 60 if minutes is not None else None
        out["unknown"] = None if minutes is not None else FUNCTION_UNKNOWN
        return out
    if match is None:
        out["unknown"] = (f"no calibration entry for model {trial['model']!r} on {device!r} (nor vanilla's, "
                          "for a method cost ratio)")  # fmt: skip
        return out
    overhead = calibration.overhead_s(trial["model"])
    notes = []
    if match.entry.threads and device == "cpu" and match.entry.threads != int(spec.resources.cpus):
        notes.append(f"measured with {match.entry.threads} threads; a trial has {spec.resources.cpus:g} CPUs "
                     "(not scaled)")  # fmt: skip
    out["calibration"] = {
        "entry": match.entry.describe(),
        "fallback": match.fallback,
        "train_s_per_example": match.train_s_per_example,
        "eval_s_per_example": match.eval_s_per_example,
        "overhead_s": overhead,
        "notes": notes,
    }
    if train.rows is None or evals.rows is None:
        out["unknown"] = train.basis if train.rows is None else evals.basis
        return out
    workers = trial["workers"] if spec.resources.gpus > 1 else 1  # GPU ranks split each batch
    epoch = train.rows * match.train_s_per_example / workers + evals.rows * match.eval_s_per_example
    out["seconds_per_epoch"] = epoch
    out["seconds_per_trial"] = overhead + trial["epochs"] * epoch
    return out


FUNCTION_UNKNOWN = "a custom function's duration is not estimated: set function.max_minutes"


def _wall_s(durations: list[float], slots: int) -> float:
    """Longest-first list scheduling of the trials on `slots` slots: when the last one ends."""
    ends = [0.0] * max(1, slots)
    for seconds in sorted(durations, reverse=True):
        heapq.heappush(ends, heapq.heappop(ends) + seconds)
    return max(ends)


def _asha(spec: JobSpec, groups: list[dict[str, Any]], n_trials: int, units: float) -> dict[str, Any] | None:
    if spec.search.asha is None:
        return None
    rule = spec.search.asha
    max_t = max(g["epochs"] for g in groups)
    full = expected = 0.0
    for g in groups:
        epochs = asha.expected_epochs(n_trials, g["epochs"], max_t, rule.grace_period, rule.reduction_factor)
        full += g["trials"] * g["epochs"]
        expected += g["trials"] * epochs
    out: dict[str, Any] = {
        "grace_period": rule.grace_period,
        "reduction_factor": rule.reduction_factor,
        "rungs": asha.rungs(max_t, rule.grace_period, rule.reduction_factor),
        "expected_epoch_fraction": expected / full,
        "expected_device_hours": None,
        "expected_saved_device_hours": None,
        "note": "an expectation (scores exchangeable, arriving in random order); equal scores stop no trial. "
        "A budget is charged the full estimate",
    }
    if all(g["seconds_per_trial"] is not None for g in groups):
        saved = sum(g["trials"] * g["seconds_per_epoch"] * (g["epochs"] - asha.expected_epochs(
            n_trials, g["epochs"], max_t, rule.grace_period, rule.reduction_factor)) for g in groups)  # fmt: skip
        total = sum(g["trials"] * g["seconds_per_trial"] for g in groups)
        out["expected_device_hours"] = (total - saved) * units / 3600
        out["expected_saved_device_hours"] = saved * units / 3600
    return out


UNKNOWN_GPU = ("GPU memory unknown (SMARTUNE_GPU_KIND unset or not a known GPU): the worker packs by the "
               "memory the Ray nodes advertise")  # fmt: skip


def memory_plan(spec: JobSpec, groups: list[dict[str, Any]], settings: Settings) -> dict[str, Any] | None:
    """What each trial reserves per GPU and how the trials pack; None for CPU trials."""
    if spec.resources.gpus == 0:
        return None
    largest = max((g["memory"] for g in groups if g["memory"]), key=lambda m: m["mb"])
    mb = spec.resources.gpu_memory_mb or largest["mb"]
    per_gpu = gpu_memory.gpu_memory_of(settings.gpu_kind)
    fraction = spec.resources.model_copy(update={"gpu_memory_mb": mb}).packed_gpus(per_gpu)
    return {
        "per_trial_mb": mb,
        "basis": "spec" if spec.resources.gpu_memory_mb else "estimate",  # whose figure per_trial_mb is
        "largest_estimate": largest,
        "gpu": settings.gpu_kind,
        "gpu_memory_mb": per_gpu,
        "gpu_fraction": fraction if per_gpu else None,
        "trials_per_gpu": int(1 // fraction) if per_gpu and fraction < 1 else (1 if per_gpu else None),
        "note": None if per_gpu else UNKNOWN_GPU,
    }


def plan(
    spec: JobSpec,
    *,
    settings: Settings,
    team: Team,
    calibration: Calibration,
    capacity: Resources | None = None,
    memory_table: gpu_memory.MemoryTable | None = None,
    uploaded: Uploaded | None = None,
) -> dict[str, Any]:
    """The plan of a spec that passed validation (service.validation.check_spec): JSON-able. The memory
    table defaults to the packaged one (service.costs.memory.load adds this deployment's peaks); `uploaded`:
    the row counts of the uploaded dataset the spec's `data` names, if it names one."""
    table = memory_table or gpu_memory.default_table()
    cells = spec.trials()
    # Each trial config runs once per combination of a custom function's own grid axes ([{}]: none).
    samples = spec.search.num_samples * len(spec.function_grid())
    n_trials = len(cells) * samples
    alike: dict[str, list[Any]] = {}  # the first trial of each kind, and how many there are
    for trial in cells:
        alike.setdefault(repr([trial.get(k) for k in COST_FIELDS]), [trial, 0])[1] += 1
    groups = [
        _group(trial, n * samples, spec, settings, calibration, table, uploaded)
        for trial, n in alike.values()
    ]
    if getattr(spec, "multitask", None) is not None:
        for g in groups:
            g["unknown"] = "joint multitask trials are not estimated yet"
    device, unit, units = device_of(spec, settings)
    gpu_quota, cpu_quota = quotas(team, settings)
    running = concurrency(spec.resources.cpus, spec.resources.gpus, spec.limits.max_concurrent_trials,
                          n_trials, capacity)  # fmt: skip
    unknown = [g["unknown"] for g in groups if g["unknown"]]
    durations = [g["seconds_per_trial"] for g in groups for _ in range(g["trials"])]
    known = not unknown
    trial_s = sum(durations) if known else None
    return {
        "trials": n_trials,
        "cells": len(cells),
        "plan_digest": spec.plan_digest(),  # the driver checks that it expands the same trials (dispatch)
        "samples_per_cell": spec.search.num_samples,
        "seeds": len(set(spec.seeds)),  # `cells` holds each seed apart: cells / seeds configurations
        "device": device,
        "unit": unit,
        "units_per_trial": units,
        "device_hours": trial_s * units / 3600 if trial_s is not None else None,
        "trial_hours": trial_s / 3600 if trial_s is not None else None,
        "wall_hours": _wall_s(durations, running) / 3600 if known else None,
        "concurrency": {
            "requested": spec.limits.max_concurrent_trials,
            "running": running,
            "team_quota": {"gpus": gpu_quota, "cpus": cpu_quota},
            "pool": None if capacity is None else {"gpus": capacity.gpus, "cpus": capacity.cpus},
        },
        "groups": groups,
        "asha": _asha(spec, groups, n_trials, units),
        "unknown": unknown,
        "sampled_axes": sorted(spec.sampled_axes()),  # costed at the spec's base value
        "memory": memory_plan(spec, groups, settings),
    }
