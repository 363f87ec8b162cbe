"""A finished sweep's models into the registry: each task's best trial, as a version of the team's registered
model of that task (worker.tune.registration), recorded in the summary and on the parent run.

- a single-task job: its best trial, the summary's `registered_model`;
- a job whose grid runs several tasks (a `task` axis): each task's best trial (by the summary's rule: the
  best value, then the lower seed) in its own task's model, as `registered_models.<task>`; the summary's
  `registered_model` is the record of the overall best trial's task;
- a multitask job (trained jointly): each task's best over the trials, as `tasks.<task>.registered_model`
  (worker.tune.multitask_trial.register_task_bests); `registered_model` then says so.

The parent run names the record of `registered_model` (worker.tune.registration.registry_tags). A
registration that fails is recorded with its reason, never raised: the sweep's result stands without it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from mlflow import MlflowClient

from worker.contract.spec import JobSpec
from worker.contract.tags import REGISTRY_ERROR
from worker.contract.tasks import get_task
from worker.tune.registration import register_best, registry_tags
from worker.tune.summary import TrialOutcome
from worker.tune.tracking import clear_tags, retrying, set_tags

MULTITASK = "a multitask job registers one model per task: see tasks.<task>.registered_model"
FUNCTION = "a custom-function job registers no model: its function keeps its own artifacts"


def task_bests(outcomes: Iterable[TrialOutcome], default_task: str) -> dict[str, TrialOutcome]:
    """Per task (the trial's `task` cell value; `default_task` when the grid has one task), its best trial
    among those that reported a finite value and did not fail."""
    out: dict[str, TrialOutcome] = {}
    for outcome in outcomes:
        if outcome.state == "ERROR" or outcome.value is None or not math.isfinite(outcome.value):
            continue
        task = str(outcome.cell.get("task", default_task))
        held = out.get(task)
        if held is None or (outcome.value, -outcome.seed) > (held.value or 0.0, -held.seed):
            out[task] = outcome
    return out


def register_job_models(
    client: MlflowClient,
    *,
    team: str,
    spec: JobSpec,
    job_id: str,
    experiment_id: str,
    parent_id: str,
    summary: dict[str, Any],
    outcomes: list[TrialOutcome],
) -> None:
    """Registers the job's models as the module says and records them in `summary` and on the parent run."""
    spec_hash = spec.spec_hash()
    if spec.function is not None:
        registered: dict[str, Any] = {"name": None, "alias": None, "version": None, "error": FUNCTION}
    elif spec.multitask is not None:
        # Here, not at the top: multitask_trial imports the training stack, which a driver never loads.
        from worker.tune.multitask_trial import register_task_bests

        register_task_bests(client, team, job_id, spec_hash, experiment_id, summary.get("tasks", {}))
        registered = {"name": None, "alias": None, "version": None, "error": MULTITASK}
    else:
        bests = task_bests(outcomes, spec.tasks[0])
        records = {
            task: register_best(
                client,
                team=team,
                task=task,
                job_id=job_id,
                spec_hash=spec_hash,
                best={"run_id": o.run_id, "trial_id": o.trial_id} if (o := bests.get(task)) else None,
                main_metric=get_task(task).main_metric,
            )
            for task in spec.tasks
        }
        best = summary.get("best") or {}
        overall = next((t for t, o in bests.items() if o.trial_id == best.get("trial_id")), spec.tasks[0])
        registered = records[overall]
        if len(records) > 1:
            summary["registered_models"] = records
    summary["registered_model"] = registered
    set_tags(client, parent_id, registry_tags(registered))
    if registered["version"] is not None:  # an earlier attempt's registry failure no longer holds
        clear_tags(client, retrying(lambda: client.get_run(parent_id)), [REGISTRY_ERROR])
