"""Adversarial-training baselines from the same perturbation machinery: FreeLB and PGD.

Both perturb the embedding-layer output (B, T, H) with a fp32 δ that is zero on padding, normalise the
gradient per example (ℓ2 or ℓ∞, `adv_norm`), step α (`adv_lr`) and optionally project to `adv_max_norm`.
- FreeLB (Zhu et al. 2020): K steps; each step's loss ℓ(f(x + δ_k), y)/K is back-propagated in full, so
  parameter gradients ACCUMULATE over the K steps (one optimiser update per batch). The first K−1
  backward passes happen inside `freelb_loss`; the returned loss carries step K's graph for the caller.
- PGD (Madry et al. 2018): K input-gradient-only ascent steps on the task loss, then train on the
  adversarial loss alone (no clean term).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from smart_core.config import MethodConfig
from smart_core.divergences import task_loss
from smart_core.perturbation import normalize_gradient, project_max_norm, sizes, uniform_init

EmbedFn = Callable[[], Tensor]  # () -> embedding-layer output (B, T, H) of the current batch, with graph
ForwardFn = Callable[[Tensor], Tensor]


def _init(x: Tensor, mask: Tensor, config: MethodConfig, generator: torch.Generator | None) -> Tensor:
    if config.adv_init_mag <= 0:
        return torch.zeros(x.shape, device=x.device, dtype=torch.float32)
    delta = uniform_init(x, mask, config.adv_init_mag, config.adv_norm, generator)
    return project_max_norm(delta, mask, config.adv_norm, config.adv_max_norm)


def _step(delta: Tensor, grad: Tensor, mask: Tensor, config: MethodConfig) -> Tensor:
    direction = normalize_gradient(grad.float(), "example-l2" if config.adv_norm == "l2" else "example-inf")
    return project_max_norm(
        delta.detach() + config.adv_lr * direction, mask, config.adv_norm, config.adv_max_norm
    )


def freelb_loss(
    embed: EmbedFn,
    forward: ForwardFn,
    mask: Tensor,
    labels: Tensor,
    config: MethodConfig,
    regression: bool,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Returns (loss of step K / K with graph, components). Steps 1..K−1 were already back-propagated."""
    k = config.adv_steps
    x = embed()
    delta = _init(x, mask, config, generator)
    total = torch.zeros((), device=x.device)
    first = torch.zeros((), device=x.device)
    skipped = 0
    for step in range(k):
        if step > 0:
            x = embed()  # the previous backward freed the embedding graph
        delta.requires_grad_(step < k - 1)
        loss = task_loss(forward(x + delta), labels, regression) / k
        total = total + loss.detach()
        if step == 0:
            first = loss.detach() * k
        if step == k - 1:
            break
        loss.backward()  # θ-grads accumulate across the K steps; δ.grad is filled too
        grad = delta.grad
        if grad is None or not bool(torch.isfinite(grad).all()):
            skipped = 1  # keep the last finite δ
            delta = delta.detach()
            continue
        delta = _step(delta, grad, mask, config)
    linf, l2 = sizes(delta)
    components = {"task_loss": first, "adv_loss": total, "delta_linf": linf, "delta_l2": l2}
    components["nonfinite_skips"] = torch.tensor(float(skipped))
    return loss, components


def pgd_loss(
    embed: EmbedFn,
    forward: ForwardFn,
    mask: Tensor,
    labels: Tensor,
    config: MethodConfig,
    regression: bool,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Returns (adversarial task loss with graph, components)."""
    x = embed()
    x_fixed = x.detach()
    delta = _init(x, mask, config, generator)
    skipped = 0
    for _ in range(config.adv_steps):
        delta.requires_grad_(True)
        inner = task_loss(forward(x_fixed + delta), labels, regression)
        (grad,) = torch.autograd.grad(inner, delta)  # input gradient only: no parameter .grad touched
        if not bool(torch.isfinite(grad).all()):
            skipped = 1
            delta = delta.detach()
            break
        delta = _step(delta, grad, mask, config)
    loss = task_loss(forward(x + delta.detach()), labels, regression)
    linf, l2 = sizes(delta)
    components = {"task_loss": loss.detach(), "adv_loss": loss.detach(), "delta_linf": linf, "delta_l2": l2}
    components["nonfinite_skips"] = torch.tensor(float(skipped))
    return loss, components
