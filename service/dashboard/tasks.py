"""A multitask job's page: each task's best dev score, live from its trials, final from its summary.

A multitask trial logs `tasks/<task>/best_score|best_stage|best_epoch` on its run after every epoch unit
(worker.tune.multitask_trial); once the job has succeeded, its summary's `tasks` holds the same over all
trials, with each task's registered model. Both become one row per task: task, value, stage (`joint` or
`finetune`), epoch within the stage, trial, seed and, when registered, the model's `models:/` URI.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from service.api.redact import public_summary

STAGES = {0: "joint", 1: "finetune"}  # worker.training.multitask_run.STAGE_CODES
_PREFIX = "tasks/"


def _live(trials: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """task -> the best of the trials' latest per-task metrics."""
    out: dict[str, dict[str, Any]] = {}
    for trial in trials:
        metrics = trial.get("metrics") or {}
        for key, value in metrics.items():
            if not (key.startswith(_PREFIX) and key.endswith("/best_score")) or value is None:
                continue
            task = key[len(_PREFIX) : -len("/best_score")]
            if task in out and out[task]["value"] >= value:
                continue
            stage = metrics.get(f"{_PREFIX}{task}/best_stage")
            epoch = metrics.get(f"{_PREFIX}{task}/best_epoch")
            out[task] = {"value": value, "stage": STAGES.get(int(stage)) if stage is not None else None,
                         "epoch": int(epoch) if epoch is not None else None, "trial_id": trial.get("trial_id"),
                         "seed": (trial.get("params") or {}).get("seed")}  # fmt: skip
    return out


def task_rows(trials: Iterable[Mapping[str, Any]], summary: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """One row per task, in name order: the summary's when the job has one, else the trials' so far."""
    tasks = public_summary(summary).get("tasks") if summary else None
    results = tasks if tasks else _live(trials)
    rows = []
    for task in sorted(results):
        result = dict(results[task])
        registered = result.pop("registered_model", None) or {}
        rows.append(
            {
                "task": task,
                **result,
                "model_uri": registered.get("uri"),
                "model_error": registered.get("error"),
            }
        )
    return rows
