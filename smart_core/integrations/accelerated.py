"""SMART in an accelerate loop, on one process or several (`accelerate launch`, `notebook_launcher`).

    accelerator = Accelerator(mixed_precision="bf16")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    smart = AcceleratedSmart(accelerator, model, MethodConfig(), planned_updates=len(loader) * epochs)
    for batch in loader:
        with accelerator.accumulate(model):      # optional: accelerate's gradient accumulation
            loss, parts = smart.backward(batch)  # every forward, the weighted backward, the all-reduce
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
        if accelerator.sync_gradients:
            smart.after_update()                 # the teacher moves once per optimiser step

Why not DDP's own gradient sync: a SMART step runs several forwards with graph before one backward, which
DDP's reducer refuses. The forwards run on the unwrapped model; `backward` weights each process's loss by
its share of the micro-batch's examples on all processes and sums the gradients across processes
at the step's last micro-batch: the update is the whole batch's mean, as on one process with all of it. The
processes start from process 0's weights, so weights and teacher stay identical on every process.
Precision as in the project's loop: the step runs under `accelerator.autocast()`, and accelerate's autocast
wrapper around `model.forward` is removed (it would re-enable autocast inside the passes that SMART's
precision plan runs in fp32); run evaluation under `accelerator.autocast()` too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from accelerate import Accelerator
from torch import Tensor, nn
from transformers import PreTrainedModel

from smart_core.config import MethodConfig
from smart_core.integrations.loss import SmartLoss


class AcceleratedSmart:
    """SMART's loss and backward for a model prepared (or not) by `accelerator`."""

    def __init__(
        self,
        accelerator: Accelerator,
        model: nn.Module,
        method: MethodConfig | None = None,
        *,
        planned_updates: int,
        regression: bool | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        self.accelerator = accelerator
        core = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
        if not isinstance(core, PreTrainedModel):
            raise TypeError(f"AcceleratedSmart needs a Hugging Face model, got {type(core).__name__}")
        self.model = core
        self.trainable = [p for p in core.parameters() if p.requires_grad]
        if self.distributed:
            with torch.no_grad():
                for tensor in core.state_dict().values():  # weights and buffers: process 0's everywhere
                    dist.broadcast(tensor, src=0)
        # Built after the broadcast: θ̃ = θ₀ is the same on every process.
        self.smart = SmartLoss(
            core,
            method or MethodConfig(),
            planned_updates=planned_updates,
            regression=regression,
            generator=generator,
        )

    @property
    def distributed(self) -> bool:
        return self.accelerator.num_processes > 1 and dist.is_available() and dist.is_initialized()

    def backward(self, batch: Mapping[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """Forwards and backward for this process's micro-batch; returns (its loss, components), detached.

        The loss is weighted by this process's share of the micro-batch's examples on all processes (one
        all-reduce of a count), so the summed gradients are the whole micro-batch's mean; accelerate divides
        by `gradient_accumulation_steps` (micro-batches of equal size, as accelerate assumes). At the step's
        last micro-batch (`accelerator.sync_gradients`) the gradients are summed across processes.
        """
        labels = batch["labels"]
        examples = self._count(len(labels))
        with self.accelerator.autocast():
            loss, parts = self.smart(batch)
        self.accelerator.backward(loss * (len(labels) / examples))
        if self.distributed and self.accelerator.sync_gradients:
            self._sum_gradients()
        return loss.detach(), parts

    def after_update(self) -> None:
        """Once after each optimiser step: the teacher's schedule (identical on every process)."""
        self.smart.after_update()

    def state_dict(self) -> dict[str, Any]:
        return self.smart.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.smart.load_state_dict(state)

    def _sum_gradients(self) -> None:
        """Every gradient summed across processes in place: one flat buffer, one collective (as
        worker.training.ranks); a parameter without a gradient here contributes zeros. Under fp16 the
        gradients are still scaled, by the same scale on every process."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.trainable]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for param in self.trainable:
            param.grad = flat[offset : offset + param.numel()].view_as(param).clone()
            offset += param.numel()

    def _count(self, examples: int) -> int:
        if not self.distributed:
            return examples
        total = torch.tensor(examples, dtype=torch.long, device=self.accelerator.device)
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return int(total)
