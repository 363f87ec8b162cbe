"""A multitask run (MT-DNN-SMART): the joint stage, then per-task fine-tuning from the shared weights.

Stage 1, joint: `config.epochs` epochs of MultiTaskSession; each update is one batch of one task, in the
order of worker.training.task_order, with the single-task step of worker.training.loop (the method, its
divergence and the shared teacher come from the batch's task). After each epoch every task is evaluated.
Stage 2, fine-tuning (`plan.finetune_epochs` > 0): for each task in turn, a copy of the shared encoder and
that task's head trains alone as an ordinary TrainingSession with the same method (`run_training`), from a
fresh optimiser, schedule and teacher, for `finetune_epochs` epochs.

Progress goes out in epoch *units*: each joint epoch is one, each (task, fine-tuning epoch) is one; a unit
carries the epoch records of its tasks (as `run_training` makes them), a thunk giving the state to
resume from after it (`{"session": ..., "history": [units so far]}`), so a checkpoint per unit resumes the
run exactly on CPU, and a writer of one task's model as it stands after the unit (a Hugging Face folder:
the shared encoder and that task's head, or the fine-tuned copy). No logging here; files only on request.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import torch

from worker.contract.multitask import MultitaskPlan
from worker.contract.trial import TrainConfig
from worker.training.finetune import RunCallbacks, run_training, save_checkpoint, save_model
from worker.training.loop import evaluate, train_step
from worker.training.multitask_session import MultiTaskSession
from worker.training.prepared import PreparedData
from worker.training.seeding import seed_everything
from worker.training.session import TrainingSession

Unit = dict[str, Any]  # {"stage": "joint"|"finetune", "unit": n, "epoch": k, "records": {task: epoch record}}
ModelWriter = Callable[[str, Path], Path]  # (task, folder) -> the folder, holding that task's model now
Resumable = Callable[[], dict[str, Any]]  # the state to resume from after the unit
UnitCallback = Callable[[Unit, Resumable, ModelWriter], None]
STAGE_CODES = {"joint": 0, "finetune": 1}  # a stage as a number (Tune metrics are numbers)


def train_joint_epoch(session: MultiTaskSession) -> dict[str, dict[str, float]]:
    """The rest of the current joint epoch; returns each task's mean components (task -> name -> mean)."""
    session.model.train()
    epoch = session.position.epoch
    batches = {name: session.task_batches(name, epoch) for name in session.plan.tasks}
    sums, counts = session.epoch_sums, session.epoch_counts
    for name, k in session.epoch_order(epoch)[session.position.step_in_epoch :]:
        session.focus(name)
        # Focused on one task, the session has every attribute the single-task step reads.
        parts = train_step(cast(TrainingSession, session), batches[name][k])
        for key, value in parts.items():
            slot = f"{name}/{key}"
            value = value.detach().float().to(session.device)
            sums[slot] = sums[slot] + value if slot in sums else value
            counts[slot] = counts.get(slot, 0) + 1
        session.position.step_in_epoch += 1
        session.position.global_step += 1
        session.after_step()
    session.position.epoch += 1
    session.position.step_in_epoch = 0
    means: dict[str, dict[str, float]] = {name: {} for name in session.plan.tasks}
    for slot, value in sums.items():
        name, key = slot.split("/", 1)
        means[name][key] = float(value) / max(1, counts.get(slot, 1))
    sums.clear()
    counts.clear()
    return means


def evaluate_tasks(session: MultiTaskSession) -> dict[str, dict[str, float]]:
    """Every task's dev metrics with the joint model (task -> metric -> value)."""
    out = {}
    for name in session.plan.tasks:
        session.focus(name)
        out[name] = evaluate(cast(TrainingSession, session))
    return out


def task_bests(history: list[Unit], plan: MultitaskPlan) -> dict[str, dict[str, Any]]:
    """Per task, its best dev score over both stages: value, metric, stage, epoch (1-based, within the
    stage) and unit; the earlier one on a tie."""
    out: dict[str, dict[str, Any]] = {}
    for unit in history:
        for name, record in unit["records"].items():
            metric = record["main_metric"]
            value = float(record["metrics"][metric])
            if name not in out or value > out[name]["value"]:
                out[name] = {"value": value, "metric": metric, "stage": unit["stage"],
                             "epoch": unit["epoch"], "unit": unit["unit"]}  # fmt: skip
    return {name: out[name] for name in plan.tasks if name in out}


def _joint_record(session: MultiTaskSession, name: str, components: dict[str, float], metrics: dict[str, dict[str, float]],
                  seconds: float) -> dict[str, Any]:  # fmt: skip
    return {
        "epoch": session.position.epoch,
        "main_metric": session.parts[name].task.main_metric,
        "train_loss": components.get("loss", float("nan")),
        "components": components,
        "metrics": metrics[name],
        "train_seconds": seconds,
    }


def run_multitask(
    config: TrainConfig,
    plan: MultitaskPlan,
    on_unit: UnitCallback | None = None,
    state: dict[str, Any] | None = None,
    data: dict[str, PreparedData] | None = None,
) -> dict[str, Any]:
    """Both stages to the end (from `state`, a unit's resumable state, when given); returns the history
    and each task's best (`task_bests`)."""
    session = MultiTaskSession.build(config, plan, data)
    saved: dict[str, Any] = state["session"] if state is not None else {"stage": "joint", "joint": None}
    history: list[Unit] = list(state["history"]) if state is not None else []
    notify = on_unit or (lambda _unit, _state, _writer: None)

    def write_joint(name: str, directory: Path) -> Path:
        part = session.parts[name]
        return save_model(part.model, part.task, session.tokenizer, directory)

    if saved["stage"] == "joint":
        if saved["joint"] is not None:
            session.load_state_dict(saved["joint"])
        while session.position.epoch < config.epochs:
            tick = time.perf_counter()
            components = train_joint_epoch(session)
            seconds = time.perf_counter() - tick
            metrics = evaluate_tasks(session)
            unit: Unit = {"stage": "joint", "unit": len(history) + 1, "epoch": session.position.epoch,
                          "records": {n: _joint_record(session, n, components[n], metrics, seconds / len(plan.tasks))
                                      for n in plan.tasks}}  # fmt: skip
            history.append(unit)
            next_state: dict[str, Any]
            if session.position.epoch < config.epochs:
                next_state = {"stage": "joint", "joint": session.state_dict()}
            else:
                next_state = {"stage": "finetune", "shared": session.state_dict()["model"], "task_index": 0,
                              "task_session": None}  # fmt: skip
            notify(unit, lambda s=next_state: {"session": s, "history": list(history)}, write_joint)  # type: ignore[misc]
        shared = session.state_dict()["model"]
        start, task_state = 0, None
    else:
        shared = saved["shared"]
        session.model.load_state_dict(shared)
        start, task_state = int(saved["task_index"]), saved["task_session"]
    for index in range(start, len(plan.tasks) if plan.finetune_epochs > 0 else 0):
        _finetune_task(config, plan, session, index, shared, task_state, history, notify)
        task_state = None
    return {"tasks": task_bests(history, plan), "units": history, "plan": plan.to_dict()}


def _finetune_task(
    config: TrainConfig,
    plan: MultitaskPlan,
    joint: MultiTaskSession,
    index: int,
    shared: dict[str, torch.Tensor],
    task_state: dict[str, Any] | None,
    history: list[Unit],
    notify: UnitCallback,
) -> None:
    """Task `index` fine-tuned alone from the shared weights (encoder + its head), resumed from
    `task_state` when given. Its random streams are seeded by (seed, task index), not by what ran before."""
    name = plan.tasks[index]
    part = joint.parts[name]
    seed_everything(config.seed * 1_009 + index + 1, config.deterministic)
    task_config = replace(config, task=name, epochs=plan.finetune_epochs)
    model = copy.deepcopy(part.model)  # the shared encoder + this task's head, as the joint stage left them
    session = TrainingSession(
        task_config, part.task, part.train, part.evals, model, joint.tokenizer, joint.device
    )
    done: list[dict[str, Any]] = []
    if task_state is not None:
        session.load_state_dict(task_state)
        done = [u["records"][name] for u in history if u["stage"] == "finetune" and name in u["records"]]

    def on_epoch_end(finetuned: TrainingSession, record: dict[str, Any], _is_best: bool) -> None:
        record = {**record, "main_metric": part.task.main_metric}
        unit: Unit = {"stage": "finetune", "unit": len(history) + 1, "epoch": record["epoch"],
                      "records": {name: record}}  # fmt: skip
        history.append(unit)
        last = finetuned.position.epoch >= task_config.epochs
        next_state = {"stage": "finetune", "shared": shared, "task_index": index + 1 if last else index,
                      "task_session": None if last else finetuned.state_dict()}  # fmt: skip
        notify(unit, lambda: {"session": next_state, "history": list(history)},
               lambda _task, directory: save_checkpoint(finetuned, directory))  # fmt: skip

    run_training(task_config, None, RunCallbacks(on_epoch_end=on_epoch_end), session, done)
