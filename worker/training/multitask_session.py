"""The joint stage of multi-task SMART (MT-DNN-SMART, paper §5.3): one encoder shared by one head per task.

`MultiTaskSession.build(config, plan)` resolves one sequence-classification model per task (the task's own
label count, or one output for regression) and makes them share the first one's encoder module, so the
weights are: the encoder once, plus one head per task. One optimiser and one schedule run over all of them
(a head gets no gradient from another task's batch, and Adam leaves a parameter without a gradient alone);
SMART's momentum Bregman teacher is one EMA of the whole shared model (one `ProximalReference` that every
task's `smart_core.Objective` uses); each task's Objective has that task's divergence (symmetric KL for
classification, squared error for regression).

A session is focused on one task at a time (`focus`): `train`, `evals`, `task`, `adapter` and `objective`
are then that task's, and the single-task step and evaluation of worker.training.loop run on it unchanged.
`state_dict()` / `load_state_dict()` hold everything mutable, as TrainingSession's do.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from smart_core import Objective
from smart_core.bregman import ProximalReference
from worker.contract.multitask import MultitaskPlan
from worker.contract.tasks import TaskSpec, get_task
from worker.contract.trial import TrainConfig
from worker.training.adapter import EmbeddingAdapter
from worker.training.batching import EncodedDataset, length_grouped_batches, sequential_batches
from worker.training.prepared import PreparedData, prepare_data
from worker.training.ranks import SINGLE
from worker.training.seeding import seed_everything
from worker.training.session import (
    Position,
    _numpy_rng_state,
    linear_schedule,
    make_optimizer,
    padding_side,
    resolve_device,
    resolve_precision,
    task_model,
)
from worker.training.task_order import TaskBatch, task_batch_order


@dataclass
class TaskPart:
    """One task of the joint model: its data, its model (the shared encoder + its head) and objective."""

    task: TaskSpec
    config: TrainConfig  # the trial's config with `task` set to this task (what its data was read with)
    train: EncodedDataset
    evals: dict[str, EncodedDataset]
    model: nn.Module
    adapter: EmbeddingAdapter
    objective: Objective | None = None  # set by the session, once the shared teacher exists


class MultiTaskModel(nn.Module):
    """The task models as one module: `parameters()` lists the shared encoder once. Its state dict names
    the encoder under every task (`tasks.<task>.bert...`): the same tensors, stored once by torch.save."""

    def __init__(self, models: dict[str, nn.Module]) -> None:
        super().__init__()
        self.tasks = nn.ModuleDict(models)


def _share_encoder(models: Mapping[str, Any]) -> None:
    """Every task model takes the first one's encoder module (`base_model`: BERT's `bert`, ...)."""
    first = next(iter(models.values()))
    shared = first.base_model
    for model in models.values():
        setattr(model, model.base_model_prefix, shared)


def _clone_once(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A detached copy of a state dict in which tensors that shared storage (the encoder, named under
    every task) share it again: the checkpoint holds the encoder once."""
    copies: dict[tuple[int, int, tuple[int, ...]], torch.Tensor] = {}
    out = {}
    for key, value in state.items():
        ident = (value.untyped_storage().data_ptr(), int(value.storage_offset()), tuple(value.shape))
        if ident not in copies:
            copies[ident] = value.detach().clone()
        out[key] = copies[ident]
    return out


class MultiTaskSession:
    def __init__(
        self,
        config: TrainConfig,
        plan: MultitaskPlan,
        parts: dict[str, TaskPart],
        tokenizer: Any,
        device: torch.device,
    ) -> None:
        self.config, self.plan, self.parts = config, plan, parts
        self.tokenizer, self.device = tokenizer, device
        self.ranks = SINGLE  # a multitask trial runs on one worker (the spec refuses more)
        self.model = MultiTaskModel({name: part.model for name, part in parts.items()})
        self.pad_id = int(tokenizer.pad_token_id or 0)
        # One side for every task (they share the encoder, so the first task's adapter says which kind).
        self.padding_side = padding_side(config, tokenizer, next(iter(parts.values())).adapter)
        self.batches_per_epoch = {n: -(-len(p.train) // config.batch_size) for n, p in parts.items()}
        self.steps_per_epoch = sum(self.batches_per_epoch.values())  # all tasks' batches: one epoch
        self.total_steps = self.steps_per_epoch * config.epochs
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(config, self.trainable)
        self.scheduler = linear_schedule(self.optimizer, self.total_steps, config.warmup_fraction)
        method = config.method_config()
        self.reference: ProximalReference | None = None
        for part in parts.values():
            objective = Objective(
                method,
                regression=part.task.is_regression,
                module=self.model,
                planned_updates=self.total_steps,
                diagnostic_params=part.adapter.head_parameters(),
            )
            # One teacher for the whole shared model: the first objective's; the others drop their own
            # copy at once (so at most two copies of the weights exist while building).
            if self.reference is None:
                self.reference = objective.reference
            else:
                objective.reference = self.reference
            part.objective = objective
        self.position = Position()
        self.epoch_sums: dict[str, torch.Tensor] = {}  # "<task>/<component>" -> running sum this epoch
        self.epoch_counts: dict[str, int] = {}
        self.skipped_steps = 0
        self.consecutive_skips = 0
        self.autocast_dtype = resolve_precision(config.precision, device)
        self.precision = {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.autocast_dtype]
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.autocast_dtype == torch.float16)
        self.focus(plan.tasks[0])

    @classmethod
    def build(
        cls, config: TrainConfig, plan: MultitaskPlan, data: dict[str, PreparedData] | None = None
    ) -> MultiTaskSession:
        """The joint model and every task's data (`data`: task -> what the sweep prepared, else read)."""
        seed_everything(config.seed, config.deterministic)
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        tasks = {name: get_task(name) for name in plan.tasks}
        models: dict[str, nn.Module] = {}
        tokenizer: Any = None
        for name, task in tasks.items():
            models[name], tokenizer = task_model(config, task)
        _share_encoder(models)
        device = resolve_device(config.device)
        parts: dict[str, TaskPart] = {}
        method = config.method_config()
        for name, task in tasks.items():
            task_config = replace(config, task=name)
            prepared = (data or {}).get(name) or prepare_data(task_config, task, tokenizer)
            model = models[name].to(device)
            adapter = EmbeddingAdapter(model, task.is_regression, site=method.perturb_site)
            parts[name] = TaskPart(task, task_config, prepared.train, prepared.evals, model, adapter)
        return cls(config, plan, parts, tokenizer, device)

    def focus(self, name: str) -> None:
        """Points the single-task attributes (what worker.training.loop reads) at task `name`."""
        part = self.parts[name]
        assert part.objective is not None
        self.task, self.train, self.evals = part.task, part.train, part.evals
        self.adapter, self.objective = part.adapter, part.objective

    def task_batches(self, name: str, epoch: int) -> list[list[int]]:
        """Task `name`'s batches (example indices) of `epoch`: its own seeded stream per (seed, epoch, task)."""
        index = self.plan.tasks.index(name)
        generator = torch.Generator().manual_seed((self.config.seed * 100_003 + epoch) * 1_009 + index)
        train, size = self.parts[name].train, self.config.batch_size
        if self.config.length_grouping:
            return length_grouped_batches(train.lengths, size, generator)
        order = torch.randperm(len(train), generator=generator).tolist()
        return [order[i : i + size] for i in range(0, len(order), size)]

    def epoch_order(self, epoch: int) -> list[TaskBatch]:
        return task_batch_order(self.batches_per_epoch, self.plan.sampling, self.config.seed, epoch)

    def eval_batches(self, split: str) -> list[list[int]]:
        return sequential_batches(len(self.evals[split]), max(self.config.batch_size, 64))

    def after_step(self) -> None:
        """Every task's objective counts the joint updates (the diagnostics' schedule is global)."""
        for part in self.parts.values():
            assert part.objective is not None
            part.objective.steps = self.position.global_step

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": _clone_once(self.model.state_dict()),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "reference": self.reference.state_dict() if self.reference is not None else None,
            "position": vars(self.position).copy(),
            "nonfinite_skips": {n: p.objective.nonfinite_skips for n, p in self.parts.items() if p.objective},
            "epoch_sums": {k: v.detach().cpu().clone() for k, v in self.epoch_sums.items()},
            "epoch_counts": dict(self.epoch_counts),
            "skipped_steps": self.skipped_steps,
            "consecutive_skips": self.consecutive_skips,
            "scaler": self.scaler.state_dict(),
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                "python": random.getstate(),
                "numpy": _numpy_rng_state(),
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.reference is not None and state["reference"] is not None:
            self.reference.load_state_dict(state["reference"])
        self.position = Position(**state["position"])
        for name, skips in state["nonfinite_skips"].items():
            objective = self.parts[name].objective
            assert objective is not None
            objective.nonfinite_skips = int(skips)
        self.epoch_sums = {k: v.to(self.device) for k, v in state["epoch_sums"].items()}
        self.epoch_counts = dict(state["epoch_counts"])
        self.skipped_steps = int(state["skipped_steps"])
        self.consecutive_skips = int(state["consecutive_skips"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.after_step()
        rng = state["rng"]
        torch.set_rng_state(rng["torch"])
        if rng["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
