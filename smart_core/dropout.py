"""How the regulariser's and the teacher's extra forwards treat dropout.

The paper is silent on it, yet it decides what R_s measures (design notes in docs/architecture.md):
- `independent`: every forward draws its own masks (the official mt-dnn code). R_s then also measures
  the divergence between two dropout draws (an R-Drop term), which is nonzero even with no perturbation.
- `shared`: every extra forward replays the masks of the clean forward: the random-number state taken
  just before the clean forward is restored before each of them. Same ops on same shapes draw the same
  masks, so the clean and perturbed forwards differ only by the perturbation. The random stream then
  continues where it was, as if the replayed forwards had drawn nothing.
- `off`: the extra forwards run in eval mode (no dropout at all).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class RngState:
    """The global generators that dropout draws from: the CPU one and, on CUDA, the device's."""

    cpu: Tensor
    device: torch.device
    accelerator: Tensor | None

    @classmethod
    def capture(cls, device: torch.device) -> RngState:
        accelerator = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
        return cls(torch.get_rng_state(), device, accelerator)

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.accelerator is not None:
            torch.cuda.set_rng_state(self.accelerator, self.device)


@contextmanager
def replaying(state: RngState | None) -> Iterator[None]:
    """Runs the body with the generators at `state` (None: as they are), then puts them back as they were
    before the body, so a replayed forward consumes nothing from the random stream."""
    if state is None:
        yield
        return
    now = RngState.capture(state.device)
    state.restore()
    try:
        yield
    finally:
        now.restore()


@contextmanager
def eval_mode(module: nn.Module | None) -> Iterator[None]:
    """Runs the body with `module` in eval mode; every submodule's own mode is restored afterwards."""
    if module is None:
        yield
        return
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for submodule, training in modes:
            submodule.training = training
