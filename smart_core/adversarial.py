"""The smoothness-inducing adversarial regulariser R_s (paper Algorithm 1, lines 5-10), model-agnostic.

It knows nothing of transformers: it gets the embedding-layer output x (B, T, H), a callable that maps
embeddings to outputs, and the clean outputs f(x). Steps:
1. init    δ = ν ~ N(0, σ²I), fp32, zero on padding;
2. ascend  T_x times: g = ∇_δ ℓ_s(f(x + δ), sg(f(x))) with an input-gradient-only pass
           (autograd.grad w.r.t. δ: no parameter .grad is touched), normalise g, δ ← Proj(δ + η·g);
3. outer   R_s = ℓ_s(f(x + sg(δ)), f(x)): gradient reaches the parameters through both forwards.
A non-finite inner gradient skips the regulariser for the batch (R_s = 0) and is counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from smart_core.config import MethodConfig
from smart_core.divergences import divergence
from smart_core.perturbation import gaussian_init, normalize_gradient, project, sizes

ForwardFn = Callable[[Tensor], Tensor]  # embeddings (B, T, H) -> logits (B, C) or predictions (B,)


@dataclass
class AdversarialResult:
    """R_s (a scalar with graph, or 0 when skipped) and detached diagnostics."""

    r_s: Tensor
    delta_linf: Tensor  # max |δ| applied, embedding units
    delta_l2: Tensor  # mean over examples of ‖δ_i‖_2
    step_to_noise: Tensor  # ‖η·ĝ‖ / ‖ν‖ on the first ascent step (mt-dnn's `eff_perturb`); 0 if T_x = 0
    skipped: bool  # True when a non-finite gradient made us skip R_s for this batch


def ascend(
    x: Tensor,
    clean: Tensor,
    forward: ForwardFn,
    mask: Tensor,
    config: MethodConfig,
    regression: bool,
    generator: torch.Generator | None = None,
) -> tuple[Tensor | None, Tensor]:
    """Steps 1-2: the adversarial perturbation δ (B, T, H) fp32 detached, or None if a gradient was non-finite.

    Returns (δ, step_to_noise). `x` and `clean` are detached here: this pass never builds parameter grads.
    """
    x_fixed = x.detach()
    target = clean.detach()
    delta = gaussian_init(x_fixed, mask, config.sigma, generator)
    noise_norm = delta.norm()
    step_to_noise = torch.zeros((), device=x.device)
    for step in range(config.ascent_steps):
        delta.requires_grad_(True)
        perturbed = forward(x_fixed + delta)  # fp32 + fp32: the 1e-5 step survives the add
        # "sum": each example's gradient is independent of the batch size (mean would shrink it by B).
        inner = divergence(perturbed, target, regression=regression, reduction="sum")
        (grad,) = torch.autograd.grad(inner, delta)
        if not bool(torch.isfinite(grad).all()):
            return None, step_to_noise
        direction = normalize_gradient(grad.float(), config.grad_norm)
        if step == 0:
            step_to_noise = (config.eta * direction).norm() / noise_norm.clamp_min(1e-30)
        delta = project(
            delta.detach() + config.eta * direction,
            mask,
            config.projection,
            config.norm_p,
            config.epsilon,
            config.renorm_stabilizer,
        )
    return delta.detach(), step_to_noise


def smoothness_regularizer(
    x: Tensor,
    clean: Tensor,
    forward: ForwardFn,
    mask: Tensor,
    config: MethodConfig,
    regression: bool,
    generator: torch.Generator | None = None,
) -> AdversarialResult:
    """R_s for one batch: the divergence between f(x + δ_adv) and f(x), batch mean, both with graph."""
    delta, step_to_noise = ascend(x, clean, forward, mask, config, regression, generator)
    if delta is None:
        zero = torch.zeros((), device=x.device)
        return AdversarialResult(zero, zero, zero, step_to_noise, skipped=True)
    perturbed = forward(x + delta)  # only δ is detached: gradient flows into x's graph and the weights
    r_s = divergence(perturbed, clean, regression=regression)
    linf, l2 = sizes(delta)
    return AdversarialResult(r_s, linf, l2, step_to_noise.detach(), skipped=False)
