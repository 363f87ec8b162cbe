"""The summary of a sweep: trials by state, per-cell mean and std over seeds, and the best trial.

Pure data in, JSON-able dict out (no Ray, no MLflow): the driver collects one `TrialOutcome` per trial
and logs the result on the parent run and as the last line of its stdout. A trial's value is its best
epoch's main metric (the paper's model selection on dev). Cell statistics use the trials that reported
at least one epoch (TERMINATED, and STOPPED ones with the value they had reached); failed trials are
listed in their cell but not averaged. `std` is the sample standard deviation (n - 1), null for n < 2.
`errors` lists each failed trial's error class and one-line reason, as on its MLflow run. The driver adds
`registered_model` once the best trial's model is this job's version of the team's registered model of the
task (worker.tune.registration): `name` (`smartune-<team>-<task>`), `alias` (`best`), `version`, `uri`
(`models:/<name>/<version>`), `best_uri` (`models:/<name>@best`), `best_version`, `alias_moved` and
`alias_note` (whether this version took `best`, and why), `dev_score`, `model_uri`, `run_id` and `trial_id`;
or `version` null and `error` saying why nothing was registered. A grid over several tasks adds
`registered_models` (task -> such an entry; worker.tune.job_models).

A multitask job (the spec's `multitask` block) adds `tasks`: per task, the best dev score over all its
trials with the trial, the stage (`joint` or `finetune`) and the epoch within that stage; and its best
trial (by the mean over tasks of each task's best) carries its own per-task results as `best.tasks`. The
driver then adds each task's registered model as `tasks.<task>.registered_model`
(worker.tune.multitask_trial.register_task_bests).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from worker.contract.grid import cell_key
from worker.contract.tags import STATES, State


@dataclass(frozen=True)
class TrialOutcome:
    trial_id: str
    state: State
    cell: Mapping[str, Any]  # the trial's values on the cell axes (not the seed)
    seed: int
    value: float | None  # best epoch's main metric; None before the first epoch
    epochs_done: int = 0
    run_id: str | None = None
    checkpoint_uri: str | None = None
    error_class: str | None = None
    error: str | None = None  # the failure's one-line reason (`smartune.error`), for an ERROR trial
    extra: Mapping[str, Any] = field(default_factory=dict)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def cells(outcomes: Iterable[TrialOutcome]) -> list[dict[str, Any]]:
    groups: dict[str, list[TrialOutcome]] = {}
    for outcome in outcomes:
        groups.setdefault(cell_key(outcome.cell), []).append(outcome)
    out = []
    for members in groups.values():
        values = [v for m in members if m.state != "ERROR" and (v := _finite(m.value)) is not None]
        out.append(
            {
                "params": dict(members[0].cell),
                "n": len(values),
                "mean": statistics.fmean(values) if values else None,
                "std": statistics.stdev(values) if len(values) > 1 else None,
                "trial_ids": sorted(m.trial_id for m in members),
            }
        )
    return out


def task_summary(outcomes: Iterable[TrialOutcome]) -> dict[str, dict[str, Any]]:
    """Per task of a multitask job, its best result over the trials that reported one."""
    out: dict[str, dict[str, Any]] = {}
    for outcome in outcomes:
        if outcome.state == "ERROR":
            continue
        for task, result in dict(outcome.extra.get("tasks", {})).items():
            value = _finite(result.get("value"))
            if value is not None and (task not in out or value > out[task]["value"]):
                out[task] = {**result, "value": value, "trial_id": outcome.trial_id, "run_id": outcome.run_id,
                             "seed": outcome.seed}  # fmt: skip
    return out


def build_summary(
    *,
    job_id: str,
    tracking_uri: str,
    parent_run_id: str,
    main_metric: str,
    outcomes: list[TrialOutcome],
) -> dict[str, Any]:
    by_state = dict.fromkeys(STATES, 0)
    for outcome in outcomes:
        by_state[outcome.state] += 1
    ranked = [o for o in outcomes if o.state != "ERROR" and _finite(o.value) is not None]
    best = max(ranked, key=lambda o: (o.value, -o.seed), default=None)
    summary: dict[str, Any] = {
        "job_id": job_id,
        "tracking_uri": tracking_uri,
        "parent_run_id": parent_run_id,
        "main_metric": main_metric,
        "trials_by_state": by_state,
        "cells": cells(outcomes),
        "errors": [
            {"trial_id": o.trial_id, "run_id": o.run_id, "error_class": o.error_class, "error": o.error}
            for o in outcomes
            if o.state == "ERROR"
        ],
        "best": None
        if best is None
        else {
            "params": {**best.cell, "seed": best.seed},
            "value": best.value,
            "run_id": best.run_id,
            "checkpoint_uri": best.checkpoint_uri,
            "trial_id": best.trial_id,
        },
    }
    tasks = task_summary(outcomes)
    if tasks:  # a multitask job
        summary["tasks"] = tasks
        if best is not None and summary["best"] is not None:
            summary["best"]["tasks"] = dict(best.extra.get("tasks", {}))
    return summary


def summary_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
    """The summary's numbers as parent-run metrics."""
    metrics = {f"trials_{state.lower()}": float(n) for state, n in summary["trials_by_state"].items()}
    metrics["trials_total"] = float(sum(summary["trials_by_state"].values()))
    if summary["best"] is not None:
        metrics["best_score"] = float(summary["best"]["value"])
    return metrics
