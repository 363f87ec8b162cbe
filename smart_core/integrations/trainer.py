"""SMART in a Hugging Face `Trainer`: `SmartTrainer` trains with the project's loss (λ_s·R_s + μ·D_Breg).

    trainer = SmartTrainer(model=model, args=TrainingArguments(...), train_dataset=..., method=MethodConfig())
    trainer.train()

What it changes of `Trainer`, and why:
- the training loss is `SmartLoss` (smart_core.integrations.loss); evaluation keeps the model's own loss;
- each micro-batch's loss is weighted by its share of the examples in the optimiser step, as the project's
  loop weights them (`loss_is_scaled_for_ga`): gradient accumulation gives the whole batch's mean even
  when the last micro-batch is smaller;
- the momentum teacher moves once per optimiser step (`on_optimizer_step`), not per micro-batch;
- `bf16` / `fp16`: the step runs under `torch.autocast` (`autocast_smart_context_manager`), as the project's
  loop does, and accelerate's own autocast wrapper around `model.forward` is removed: it would re-enable
  autocast inside the passes that SMART's precision plan runs in fp32 (smart_core.precision);
- `torch_compile`: the encoder is compiled and the embedding layer, where SMART hooks in, stays eager (the
  project's `compile_encoder`); accelerate does not compile the whole model.
One process only: SMART's several forwards per step do not fit DDP's one-forward-one-backward contract; for
several processes use smart_core.integrations.accelerated, which all-reduces the gradients itself.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from accelerate.utils import DynamoBackend
from torch import Tensor, nn
from transformers import (
    PreTrainedModel,
    Trainer,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

from smart_core.config import MethodConfig
from smart_core.integrations.embedding import compile_encoder, unwrap_peft
from smart_core.integrations.loss import SmartLoss


class SmartTrainer(Trainer):
    """A `Trainer` whose training loss is SMART's; `method` says which (default: the paper's SMART).

    `smart` (the `SmartLoss`, with its teacher) is built when training begins, once the number of optimiser
    steps is known. Logs gain the step components' means since the last log (`smart/r_s`, `smart/d_breg`...).
    """

    loss_is_scaled_for_ga = True  # compute_loss weights each micro-batch by its share of the step's examples

    def __init__(
        self,
        *args: Any,
        method: MethodConfig | None = None,
        regression: bool | None = None,
        generator: torch.Generator | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if self.args.world_size > 1:
            raise ValueError(
                f"SmartTrainer runs on one process (world_size {self.args.world_size}): DDP expects one forward "
                "per backward and SMART runs several; use smart_core.integrations.accelerated for several"
            )
        # A peft model (LoRA) trains through the transformers model it wraps: its adapters are inside it.
        core = unwrap_peft(self.model)
        if not isinstance(core, PreTrainedModel):
            raise TypeError(f"SmartTrainer needs a Hugging Face model, got {type(self.model).__name__}")
        self.core: PreTrainedModel = core
        self.method = method or MethodConfig()
        self.regression = regression
        self.generator = generator
        self.smart: SmartLoss | None = None
        self._step_examples = 0  # examples in the current optimiser step (all its micro-batches)
        # Components since the last log: Σ value·share and Σ share per key (diagnostics come every N steps).
        self._sums: dict[str, Tensor] = {}
        self._shares: dict[str, float] = {}
        if self.args.torch_compile:
            compile_encoder(self.core)
            self.accelerator.state.dynamo_plugin.backend = DynamoBackend.NO
        self.add_callback(_TeacherSchedule(self))

    def start_smart(self, planned_updates: int) -> None:
        """A fresh `SmartLoss` (teacher θ̃ = the current weights) for `planned_updates` optimiser steps."""
        self.smart = SmartLoss(
            self.core,
            self.method,
            planned_updates=max(1, planned_updates),
            regression=self.regression,
            generator=self.generator,
        )

    def autocast_smart_context_manager(self, cache_enabled: bool | None = True) -> Any:
        """`torch.autocast` at bf16 / fp16 when the arguments ask for it (accelerate's is removed, above)."""
        dtype = torch.bfloat16 if self.args.bf16 else torch.float16 if self.args.fp16 else None
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.args.device.type, dtype=dtype, cache_enabled=bool(cache_enabled))

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: torch.device) -> Any:
        samples, items = super().get_batch_samples(epoch_iterator, num_batches, device)
        self._step_examples = sum(len(sample["labels"]) for sample in samples if "labels" in sample)
        return samples, items

    def compute_loss(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Tensor | int | None = None,
    ) -> Any:
        if return_outputs or not model.training or self.smart is None:  # evaluation: the model's own loss
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        # Removes accelerate's autocast wrapper from the model's forward (idempotent); see the module docstring.
        self.accelerator.unwrap_model(model, keep_fp32_wrapper=False)
        loss, parts = self.smart(inputs)
        share = len(inputs["labels"]) / max(1, self._step_examples)
        for key, value in parts.items():
            self._sums[key] = self._sums[key] + value * share if key in self._sums else value * share
            self._shares[key] = self._shares.get(key, 0.0) + share
        return loss * share

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self._sums and "loss" in logs:  # a training log: the components' means since the last one
            logs |= {f"smart/{key}": float(value) / self._shares[key] for key, value in self._sums.items()}
            self._sums.clear()
            self._shares.clear()
        super().log(logs, start_time)


class _TeacherSchedule(TrainerCallback):
    """Builds the trainer's SmartLoss when training begins; moves its teacher after each optimiser step."""

    def __init__(self, trainer: SmartTrainer) -> None:
        self.trainer = trainer

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.trainer.start_smart(state.max_steps)

    def on_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.trainer.smart is not None:
            self.trainer.smart.after_update()
