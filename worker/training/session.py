"""Everything one fine-tuning run holds: data, model, optimiser, schedule, objective, and its position.

`TrainingSession.build(config)` resolves the task, model and data (worker.training.prepared); `state_dict()` / `load_state_dict()`
capture all mutable state (weights, optimiser, scheduler, Bregman reference, step, epoch, RNG) so a run
killed mid-epoch resumes bit for bit on CPU. The state is tensors and plain Python data only, so a
checkpoint of it loads with `torch.load(weights_only=True)` (no code runs on load). Batches of epoch e come from a generator seeded with
(seed, e), so the sampler's position is just (epoch, step within the epoch).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.optim.lr_scheduler import LambdaLR

from smart_core import Objective
from smart_core.integrations.embedding import EmbeddingAdapter, compile_encoder
from worker.contract.lora import lora_spec
from worker.contract.tasks import TaskSpec, get_task
from worker.contract.trial import TrainConfig
from worker.training.batching import EncodedDataset, length_grouped_batches, sequential_batches
from worker.training.lora import is_lora, load_trainable_state, trainable_state
from worker.training.models import resolve_model
from worker.training.prepared import PreparedData, prepare_data
from worker.training.ranks import SINGLE, Ranks
from worker.training.seeding import seed_everything


def resolve_device(name: str, ranks: Ranks = SINGLE) -> torch.device:
    """The device `name` means for this rank: with several ranks on GPUs, rank r takes the trial's r-th
    visible GPU (Ray sets CUDA_VISIBLE_DEVICES to the trial's GPUs)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and ranks.parallel:
        if torch.cuda.device_count() < ranks.world:
            raise ValueError(
                f"workers: {ranks.world} ranks need {ranks.world} GPUs, but this process sees "
                f"{torch.cuda.device_count()}; ask for `resources.gpus: {ranks.world}`"
            )
        return torch.device("cuda", ranks.rank)
    return torch.device(name)


class PrecisionUnsupported(ValueError):
    """The trial asks for a precision its device cannot run (bf16 on a GPU older than Ampere)."""


def resolve_precision(name: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of `precision` on `device`, or None for fp32. torch's CPU autocast runs both bf16
    and fp16; a CUDA device needs compute capability 8.0 for bf16."""
    bf16_ok = device.type != "cuda" or torch.cuda.is_bf16_supported()
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" and bf16_ok else None
    if name == "bf16" and not bf16_ok:
        raise PrecisionUnsupported(
            f"precision bf16: {torch.cuda.get_device_name(device)} does not support bf16 (compute capability 8.0 "
            "or newer); use fp16 or fp32"
        )
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def linear_schedule(optimizer: torch.optim.Optimizer, total_steps: int, warmup_fraction: float) -> LambdaLR:
    """Linear warm-up over the first warmup_fraction of the updates, then linear decay to 0."""
    warmup = int(warmup_fraction * total_steps)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return LambdaLR(optimizer, factor)


# The optimisers a trial may name (worker.contract.trial.OPTIMIZERS), as data.
OPTIMIZER_CLASSES: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "adam": torch.optim.Adam,  # the paper's; weight decay coupled, 0 by default
    "adamw": torch.optim.AdamW,
    "radam": torch.optim.RAdam,
}


def make_optimizer(config: TrainConfig, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return OPTIMIZER_CLASSES[config.optimizer](
        params, lr=config.learning_rate, weight_decay=config.weight_decay
    )


def _numpy_rng_state() -> dict[str, Any]:
    """numpy's global RNG state as plain data (str, ints, a list, a float): a checkpoint holding it loads
    with `torch.load(weights_only=True)`, which refuses numpy's arrays and scalars without an allowlist.
    `np.random.set_state` takes this dict back as it is, the same generator position bit for bit."""
    state = np.random.get_state(legacy=False)
    return {
        "bit_generator": str(state["bit_generator"]),
        "state": {"key": [int(k) for k in state["state"]["key"]], "pos": int(state["state"]["pos"])},
        "has_gauss": int(state["has_gauss"]),
        "gauss": float(state["gauss"]),
    }


@dataclass
class Position:
    """Where the run stands: `epoch` (0-based) and how many batches of it are done."""

    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0


def task_model(config: TrainConfig, task: TaskSpec) -> tuple[Any, Any]:
    """`config`'s model with `task`'s head (label count or regression, head dropout), and its tokenizer."""
    return resolve_model(
        config.model,
        num_labels=task.num_labels,
        is_regression=task.is_regression,
        head_dropout=task.head_dropout,
        seed=config.seed,
        dropout=config.dropout,
        peft=lora_spec(config.peft),
    )


def padding_side(config: TrainConfig, tokenizer: Any, adapter: EmbeddingAdapter) -> str:
    """The side a batch's padding goes (`padding_side`, `auto`: the tokenizer's). Left padding needs a
    decoder, whose positions follow the attention mask: an encoder's absolute positions would shift."""
    side = str(tokenizer.padding_side) if config.padding_side == "auto" else config.padding_side
    if side == "left" and adapter.decoder is None:
        raise ValueError(
            f"padding_side: left pads an encoder ({type(adapter.model).__name__}), whose positions would then "
            "shift with the padding; use right (left is for decoders such as GPT-2, Llama and Qwen2)"
        )
    return side


class TrainingSession:
    def __init__(
        self,
        config: TrainConfig,
        task: TaskSpec,
        train: EncodedDataset,
        evals: dict[str, EncodedDataset],
        model: torch.nn.Module,
        tokenizer: Any,
        device: torch.device,
        ranks: Ranks = SINGLE,
        validation: EncodedDataset | None = None,
        rows: dict[str, str] | None = None,
    ) -> None:
        self.config, self.task, self.train, self.evals = config, task, train, evals
        # Held-out training rows that choose the best epoch (validation_fraction); None: dev chooses.
        self.validation = validation
        self.rows = dict(rows or {})  # digests of the rows used (PreparedData.rows), for the provenance
        self.model, self.tokenizer, self.device = model, tokenizer, device
        self.ranks = ranks  # data-parallel place (worker.training.ranks); SINGLE: one process
        self.synchronized = not ranks.parallel  # whether the ranks started from rank 0's weights
        method = config.method_config()
        self.adapter = EmbeddingAdapter(model, task.is_regression, site=method.perturb_site)
        self.pad_id = int(tokenizer.pad_token_id or 0)
        self.padding_side = padding_side(config, tokenizer, self.adapter)
        # A LoRA trial's checkpoint holds its trainable tensors only: the frozen base is rebuilt by name+seed.
        self.lora = is_lora(model)
        self.steps_per_epoch = -(-len(train) // config.batch_size)
        self.total_steps = self.steps_per_epoch * config.epochs
        self.trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(config, self.trainable)
        self.scheduler = linear_schedule(self.optimizer, self.total_steps, config.warmup_fraction)
        self.objective = Objective(
            method,
            regression=task.is_regression,
            module=model,
            planned_updates=self.total_steps,
            diagnostic_params=self.adapter.head_parameters(),
        )
        self.position = Position()
        # Running sums of the current epoch's components and how many steps reported each: the
        # diagnostics (r_s_control, ascent_signal) come every `diagnostics_every` steps only.
        self.epoch_sums: dict[str, torch.Tensor] = {}
        self.epoch_counts: dict[str, int] = {}
        self.skipped_steps = 0  # optimiser steps skipped for a non-finite gradient or loss, in all
        self.consecutive_skips = 0  # ... in a row, up to now: the trial stops at config.max_skipped_steps
        self.autocast_dtype = resolve_precision(config.precision, device)  # None: fp32
        self.precision = {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.autocast_dtype]
        # fp16 needs its loss scaled so small gradients survive; disabled, the scaler passes everything through.
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.autocast_dtype == torch.float16)

    @classmethod
    def build(
        cls, config: TrainConfig, ranks: Ranks = SINGLE, data: PreparedData | None = None
    ) -> TrainingSession:
        """Every rank builds the same session (same seed: the same initial weights); `ranks` says which
        share of each batch it trains and where (its GPU, or its share of the trial's CPU threads).
        `data`, when a sweep prepared it (worker.training.prepared), saves reading and tokenising."""
        seed_everything(config.seed, config.deterministic)
        if config.num_threads:
            torch.set_num_threads(max(1, config.num_threads // ranks.world))
        task = get_task(config.task)
        model, tokenizer = task_model(config, task)
        data = data or prepare_data(config, task, tokenizer)
        device = resolve_device(config.device, ranks)
        model.to(device)
        if config.compile:
            compile_encoder(model)
        return cls(
            config, task, data.train, data.evals, model, tokenizer, device, ranks, data.validation, data.rows
        )

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """The batches (lists of example indices) of `epoch`, the same on every call."""
        generator = torch.Generator().manual_seed(self.config.seed * 100_003 + epoch)
        if self.config.length_grouping:
            return length_grouped_batches(self.train.lengths, self.config.batch_size, generator)
        order = torch.randperm(len(self.train), generator=generator).tolist()
        return [order[i : i + self.config.batch_size] for i in range(0, len(order), self.config.batch_size)]

    def eval_batches(self, split: str) -> list[list[int]]:
        return sequential_batches(len(self.evals[split]), max(self.config.batch_size, 64))

    def batches_of(self, data: EncodedDataset) -> list[list[int]]:
        """Evaluation batches of any encoded set (the validation rows), in order."""
        return sequential_batches(len(data), max(self.config.batch_size, 64))

    def state_dict(self) -> dict[str, Any]:
        reference = self.objective.reference
        return {
            "model": trainable_state(self.model)
            if self.lora
            else {k: v.detach().clone() for k, v in self.model.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "reference": reference.state_dict() if reference is not None else None,
            "position": vars(self.position).copy(),
            "nonfinite_skips": self.objective.nonfinite_skips,
            "epoch_sums": {k: v.detach().cpu().clone() for k, v in self.epoch_sums.items()},
            "epoch_counts": dict(self.epoch_counts),
            "skipped_steps": self.skipped_steps,
            "consecutive_skips": self.consecutive_skips,
            "scaler": self.scaler.state_dict(),  # fp16's loss scale (plain floats and ints); {} otherwise
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                "python": random.getstate(),  # (int, tuple of ints, float | None): plain data
                "numpy": _numpy_rng_state(),
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.lora:
            load_trainable_state(self.model, state["model"])
        else:
            self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if self.objective.reference is not None and state["reference"] is not None:
            self.objective.reference.load_state_dict(state["reference"])
        self.position = Position(**state["position"])
        self.objective.nonfinite_skips = int(state["nonfinite_skips"])
        self.epoch_sums = {k: v.to(self.device) for k, v in state["epoch_sums"].items()}
        done = self.position.step_in_epoch  # a state without counts: every component came every step
        self.epoch_counts = dict(state.get("epoch_counts", dict.fromkeys(self.epoch_sums, done)))
        self.skipped_steps = int(state.get("skipped_steps", 0))
        self.consecutive_skips = int(state.get("consecutive_skips", 0))
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.objective.steps = self.position.global_step  # one objective step per optimiser step
        rng = state["rng"]
        torch.set_rng_state(rng["torch"])
        if rng["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
