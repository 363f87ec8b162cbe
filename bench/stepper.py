"""One full training update per method, as the worker runs it: the unit every step-cost benchmark times.

A step is what worker/training/loop.py::train_step does: the method's loss (smart_core.Objective over ModelFns built
from worker.training.adapter.EmbeddingAdapter), the finiteness check, backward, clip at 1.0, AdamW step,
zero_grad(set_to_none=True), objective.after_update(). The LR schedule (a scalar multiply) is left out.
Methods are `smart_core.METHOD_PRESETS` names, optionally with `+field=value` overrides (`parse_variant`),
or PEER: the smart-pytorch port at our smart-rs-only settings. A `@fused` or `@unfused` tag runs the method with
smart_core.fused's helpers compiled or eager (untagged: `auto`, compiled on a GPU): the two arms side by side. Shared by bench.step (time and memory per
method), research.memory (the memory estimate's measurements) and research.numerics (the model it loads).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import smart_core.attention as attention
from bench.padding import Batch
from smart_core import METHOD_PRESETS, MethodConfig, ModelFns, Objective, fused, method_config
from smart_core.integrations.embedding import compile_encoder
from worker.training.adapter import EmbeddingAdapter
from worker.training.models import resolve_model
from worker.training.session import resolve_precision

PEER = "smart-pytorch"  # the PyPI port, run at our smart-rs-only settings
LR = 1e-5
PLANNED_UPDATES = 10_000  # the teacher's β schedule only; irrelevant to cost
HELPER_TAGS = {"fused": "on", "unfused": "off"}  # a label's @TAG -> smart_core.fused's mode for its step
# a label's @TAG -> smart_core.attention's query-chunk budget on an accelerator for its step, in score entries:
# `wide` is one chunk up to B·heads·Tq·Tk = 2^27 (BERT-base x 512 x 32 is 1.0e8), where the default 2^24 makes 7
# and each chunk costs ~38 launches a layer (research.launch_count --chunk-elements): the lent GPU weighs the
# launches it saves against the memory it costs
CHUNK_TAGS = {"wide": 2**27}
PRECISIONS = ("fp32", "bf16")  # fp16 would need the worker's loss scaling, which a bench step leaves out


def parse_variant(label: str) -> MethodConfig:
    """A method preset with overrides: `smart`, `smart+rs_dropout=shared`, `smart+diagnostics_every=1`; a
    `@TAG` suffix (`vanilla@again`) names a twin of the same method: timed beside it, it shows the noise."""
    name, *settings = label.partition("@")[0].split("+")
    if name not in METHOD_PRESETS:
        raise ValueError(f"unknown method {name!r} in {label!r}; known: {', '.join(METHOD_PRESETS)}")
    overrides: dict[str, Any] = {}
    for setting in settings:
        key, sep, raw = setting.partition("=")
        if not sep or key not in FIELD_TYPES:
            raise ValueError(
                f"{label!r}: expected METHOD+field=value with a MethodConfig field, got {setting!r}"
            )
        overrides[key] = FIELD_TYPES[key](raw)
    return method_config(name, **overrides)


FIELD_TYPES: dict[str, Callable[[str], Any]] = {
    f.name: {"float": float, "int": int}.get(str(f.type), str) for f in dataclasses.fields(MethodConfig)
}


def load_model(name: str, num_labels: int = 2) -> tuple[nn.Module, Any]:
    """The benchmark's model (fp32, seeded head) and tokenizer; a classification task of `num_labels`."""
    return resolve_model(name, num_labels=num_labels, is_regression=False, head_dropout=0.1, seed=0)


class Stepper:
    """One method's model copy, AdamW and objective; `step()` is one full training update."""

    def __init__(
        self,
        model: nn.Module,
        method: str,
        device: torch.device,
        *,
        precision: str = "fp32",
        compile: bool = False,
    ) -> None:
        """`precision` bf16: the loss under bf16 autocast, the backward after it (worker/training/loop.py);
        `compile`: the encoder compiled as `compile: true` compiles it (smart_core.integrations.embedding)."""
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        self.autocast = resolve_precision(precision, device)  # the worker's rule (None: fp32)
        tag = method.partition("@")[2]
        self.helper_mode = HELPER_TAGS.get(tag)  # None: the process's mode (auto)
        self.chunk_elements = CHUNK_TAGS.get(tag)  # None: smart_core.attention's
        self.model = model.to(device).train()
        if compile:
            compile_encoder(self.model)
        config = parse_variant(method) if method != PEER else None
        site = config.perturb_site if config is not None else "embedding-output"
        self.adapter = EmbeddingAdapter(model, is_regression=False, site=site)
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=LR, weight_decay=0.0)
        self.objective: Objective | None = None
        if config is not None:  # as worker/training/session.py builds it, head diagnostics included
            self.objective = Objective(
                config,
                regression=False,
                module=model,
                planned_updates=PLANNED_UPDATES,
                diagnostic_params=self.adapter.head_parameters(),
            )

    def loss(self, batch: Batch, labels: Tensor) -> Tensor:
        forward: Callable[[Tensor], Tensor] = lambda emb: self.adapter.forward_from_embeddings(batch, emb)  # noqa: E731
        if self.objective is not None:
            fns = ModelFns(
                embed=lambda: self.adapter.embed(batch), forward=forward, mask=batch["attention_mask"]
            )
            return self.objective(fns, labels)[0]
        from smart_pytorch import SMARTLoss, kl_loss, sym_kl_loss  # the peer: its README's recipe

        smart = SMARTLoss(eval_fn=forward, loss_fn=kl_loss, loss_last_fn=sym_kl_loss, num_steps=1,
                          step_size=1e-3, noise_var=1e-5)  # fmt: skip
        embed = self.adapter.embed(batch)
        clean = forward(embed)
        loss: Tensor = F.cross_entropy(clean, labels) + 1.0 * smart(embed, clean)  # λ_s = 1
        return loss

    @contextlib.contextmanager
    def helpers(self) -> Iterator[None]:
        """smart_core.fused's mode and attention's accelerator chunk budget for this method's loss and backward
        (its label's tag, else as they are)."""
        with fused.fusing(self.helper_mode) if self.helper_mode else contextlib.nullcontext():
            if self.chunk_elements is None:
                yield
                return
            default, attention.ACCELERATOR_CHUNK_ELEMENTS = (
                attention.ACCELERATOR_CHUNK_ELEMENTS,
                self.chunk_elements,
            )
            try:
                yield
            finally:
                attention.ACCELERATOR_CHUNK_ELEMENTS = default

    def step(self, batch: Batch, labels: Tensor) -> None:
        device = batch["input_ids"].device
        # fp32 enters no autocast of its own: a caller's (research.memory's, bench.live_memory's) stays on
        precision = (
            torch.autocast(device.type, dtype=self.autocast) if self.autocast else contextlib.nullcontext()
        )
        with self.helpers():
            with precision:
                loss = self.loss(batch, labels)
            loss.backward()  # type: ignore[no-untyped-call]
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        if not bool(
            torch.isfinite(norm) & torch.isfinite(loss.detach())
        ):  # as worker/training/loop.py: one wait
            raise FloatingPointError(f"non-finite loss {loss.item()} or gradient norm {norm.item()}")
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.objective is not None:
            self.objective.after_update()
