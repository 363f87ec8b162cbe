"""Bregman proximal point: the reference model θ̃ and the term D_Breg(θ, θ̃) (paper Section 3, Algorithm 1).

The outer loop runs T iterations of S optimiser updates each; θ̃ is held fixed during the S updates and
refreshed after them:
- momentum (MBPP): θ̃ ← (1 − β)·θ + β·θ̃, θ̃ starting at θ₀; β = beta_early for the first
  ⌈beta_switch · planned updates⌉ updates, beta_late afterwards;
- vanilla (VBPP): θ̃ ← θ (the previous outer iterate). With S = 1 this makes D_Breg ≡ 0, so the config
  rejects it.
The reference keeps its own copy of the weights (one parameter copy) and never builds autograd graph.
Its forward leaves autocast's weight-cast cache alone: the cache is keyed on the parameter, and θ̃ is
swapped into the same parameters, so a cached forward would compute f(x; θ) instead (smart_core.precision).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from smart_core.config import MethodConfig
from smart_core.dropout import RngState, eval_mode, replaying
from smart_core.precision import uncached_autocast


class ProximalReference:
    """θ̃ for the parameters of `module` that require grad; swapped in to evaluate f(x; θ̃)."""

    def __init__(self, module: nn.Module, config: MethodConfig, planned_updates: int) -> None:
        if config.bregman == "none":
            raise ValueError("ProximalReference needs bregman='momentum' or 'vanilla'")
        if planned_updates < 1:
            raise ValueError(f"planned_updates must be >= 1, got {planned_updates}")
        self.module = module
        self.kind = config.bregman
        self.inner_updates = config.inner_updates  # S
        self.beta_early, self.beta_late = config.beta_early, config.beta_late
        self.switch_after = math.ceil(config.beta_switch * planned_updates)  # updates that use beta_early
        self.teacher_dropout = config.teacher_dropout
        self.params = [p for p in module.parameters() if p.requires_grad]
        with torch.no_grad():
            self.shadow = [p.detach().clone() for p in self.params]  # θ̃ = θ₀
        self.updates_done = 0

    def beta(self, update: int) -> float:
        """β used to refresh θ̃ after optimiser update number `update` (1-based)."""
        return self.beta_early if update <= self.switch_after else self.beta_late

    @torch.no_grad()
    def after_update(self) -> None:
        """Call once after every optimiser step; refreshes θ̃ at the end of each outer iteration."""
        self.updates_done += 1
        if self.updates_done % self.inner_updates or not self.shadow:
            return  # still inside the outer iteration (the reference stays fixed), or nothing to track
        current = [p.detach() for p in self.params]
        if self.kind == "vanilla":
            torch._foreach_copy_(self.shadow, current)
            return
        beta = self.beta(self.updates_done)
        torch._foreach_mul_(self.shadow, beta)
        torch._foreach_add_(self.shadow, current, alpha=1.0 - beta)

    @contextmanager
    def swapped(self) -> Iterator[None]:
        """Temporarily put θ̃ into the module (a pointer swap of .data, no copy)."""
        for p, s in zip(self.params, self.shadow, strict=True):
            p.data, s.data = s.data, p.data
        try:
            yield
        finally:
            for p, s in zip(self.params, self.shadow, strict=True):
                p.data, s.data = s.data, p.data

    def outputs(self, full_forward: Callable[[], Tensor], clean_rng: RngState | None = None) -> Tensor:
        """f(x; θ̃) for the current batch, without autograd, under the caller's autocast (uncached).

        teacher_dropout "off" (the default): eval mode, a target without dropout noise, and cheaper.
        "shared": the masks the clean forward drew (`clean_rng`: the generators just before it, embedding
        included). "independent": masks of its own. Each submodule's own mode is restored afterwards.
        """
        device = self.params[0].device if self.params else torch.device("cpu")
        mode = eval_mode(self.module) if self.teacher_dropout == "off" else contextlib.nullcontext()
        if self.teacher_dropout == "shared" and clean_rng is None:
            raise ValueError("teacher_dropout='shared' needs the clean forward's random state (clean_rng)")
        replay = replaying(clean_rng) if self.teacher_dropout == "shared" else contextlib.nullcontext()
        with mode, replay, torch.no_grad(), uncached_autocast(device), self.swapped():
            return full_forward().detach()

    def state_dict(self) -> dict[str, Any]:
        return {"shadow": [s.clone() for s in self.shadow], "updates_done": self.updates_done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            torch._foreach_copy_(
                self.shadow, [t.to(s.device) for s, t in zip(self.shadow, state["shadow"], strict=True)]
            )
        self.updates_done = int(state["updates_done"])
