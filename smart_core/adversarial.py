"""The smoothness-inducing adversarial regulariser R_s (paper Algorithm 1, lines 5-10), model-agnostic.

It knows nothing of transformers: it gets the embedding x (B, T, H), a callable that maps embeddings to
outputs (already set up for the step's dropout mode and precision by the caller), and the reference
outputs f(x) that R_s compares against. Steps:
1. init    δ = ν ~ N(0, σ²I) (or U(−σ, σ)), fp32, zero on padding;
2. ascend  T_x times: g = ∇_δ ℓ_s(f(x + δ), sg(f(x))) with an input-gradient-only pass
           (autograd.grad w.r.t. δ: no parameter .grad is touched), normalise g, δ ← Proj(δ + η·g);
3. outer   R_s = ℓ_s(f(x + sg(δ)), f(x)): gradient reaches the parameters through both forwards.
A non-finite inner gradient skips the regulariser for the batch (R_s = 0) and is counted, on the
device: nothing here waits for the accelerator.
The ascent gradient is a parameter (`GradientFn`): the exact one here, or its linearisation
(smart_core.linearized.linear_ascent_gradient) for an arithmetic that cannot resolve δ.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from smart_core.config import MethodConfig
from smart_core.divergences import divergence
from smart_core.perturbation import initial_noise, normalize_gradient, project, sizes

ForwardFn = Callable[[Tensor], Tensor]  # embeddings (B, T, H) -> logits (B, C) or predictions (B,)
# (x, δ, sg f(x) or None, forward, regression) -> ∇_δ ℓ_s(f(x + δ), sg f(x)) (B, T, H) fp32, per example
GradientFn = Callable[[Tensor, Tensor, "Tensor | None", ForwardFn, bool], Tensor]


@dataclass
class AdversarialResult:
    """R_s (a scalar with graph; 0 when skipped) and detached diagnostics, all tensors on x's device."""

    r_s: Tensor
    delta_linf: Tensor  # max |δ| applied, embedding units
    delta_l2: Tensor  # mean over examples of ‖δ_i‖_2
    step_to_noise: Tensor  # ‖η·ĝ‖ / ‖ν‖ on the first ascent step (mt-dnn's `eff_perturb`); 0 if T_x = 0
    skipped: Tensor  # 1.0 when a non-finite gradient made us skip R_s for this batch, else 0.0


def exact_ascent_gradient(
    x: Tensor, delta: Tensor, target: Tensor | None, forward: ForwardFn, regression: bool
) -> Tensor:
    """∇_δ ℓ_s(f(x + δ), target) (B, T, H) fp32, per example: one forward at x + δ, input gradient only."""
    if target is None:
        raise ValueError("the exact ascent gradient needs the reference outputs f(x)")
    delta = delta.detach().requires_grad_(True)
    perturbed = forward(x + delta)  # fp32 + fp32: a small step survives the add
    # "sum": each example's gradient is independent of the batch size (mean would shrink it by B).
    inner = divergence(perturbed, target, regression=regression, reduction="sum")
    (grad,) = torch.autograd.grad(inner, delta)
    return grad.float()


@contextlib.contextmanager
def weights_frozen(module: nn.Module | None) -> Iterator[None]:
    """Within: `module`'s trainable weights do not require grad (restored after, even on error).

    The ascent differentiates with respect to δ only. With the weights requiring grad, autograd also
    keeps what their gradients would need: every matmul's input activation (and, in a JVP pass, its
    tangent), about as much again as the input gradient needs. Frozen, a matmul keeps nothing of
    activation size (its input gradient needs only the weight)."""
    trainable = [p for p in module.parameters() if p.requires_grad] if module is not None else []
    try:
        for p in trainable:
            p.requires_grad_(False)
        yield
    finally:
        for p in trainable:
            p.requires_grad_(True)


def input_gradient_only(gradient: GradientFn, module: nn.Module | None) -> GradientFn:
    """`gradient` run with `module`'s weights frozen (weights_frozen): the same δ gradient, a smaller graph."""
    if module is None:
        return gradient

    def frozen(
        x: Tensor, delta: Tensor, target: Tensor | None, forward: ForwardFn, regression: bool
    ) -> Tensor:
        with weights_frozen(module):
            return gradient(x, delta, target, forward, regression)

    return frozen


def ascend(
    x: Tensor,
    reference: Tensor | None,
    forward: ForwardFn,
    mask: Tensor,
    config: MethodConfig,
    regression: bool,
    generator: torch.Generator | None = None,
    *,
    gradient: GradientFn = exact_ascent_gradient,
    noise: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Steps 1-2: (δ (B, T, H) fp32 detached, step_to_noise, finite). When an inner gradient was not
    finite, `finite` is False and δ is zero, so the caller's perturbed forward stays finite.
    `noise`: ν already drawn (else drawn here); `reference` may be None for a gradient that computes f(x)."""
    x_fixed = x.detach()
    target = reference.detach() if reference is not None else None
    delta = initial_noise(x_fixed, mask, config.sigma, config.noise, generator) if noise is None else noise
    noise_norm = delta.norm()
    step_to_noise = torch.zeros((), device=x.device)
    finite = torch.ones((), dtype=torch.bool, device=x.device)
    for step in range(config.ascent_steps):
        grad = gradient(x_fixed, delta, target, forward, regression)
        ok = torch.isfinite(grad).all()
        finite = finite & ok
        direction = torch.where(ok, normalize_gradient(grad, config.grad_norm), torch.zeros_like(grad))
        if step == 0:
            step_to_noise = (config.eta * direction).norm() / noise_norm.clamp_min(1e-30)
        delta = project(
            delta + config.eta * direction,
            mask,
            config.projection,
            config.norm_p,
            config.epsilon,
            config.renorm_stabilizer,
        )
    delta = torch.where(finite, delta, torch.zeros_like(delta))
    return delta.detach(), step_to_noise.detach(), finite


def smoothness_regularizer(
    x: Tensor,
    reference: Tensor,
    forward: ForwardFn,
    mask: Tensor,
    config: MethodConfig,
    regression: bool,
    generator: torch.Generator | None = None,
    *,
    gradient: GradientFn = exact_ascent_gradient,
) -> AdversarialResult:
    """R_s for one batch: the divergence between f(x + δ_adv) and f(x), batch mean, both with graph."""
    delta, step_to_noise, finite = ascend(
        x, reference, forward, mask, config, regression, generator, gradient=gradient
    )
    perturbed = forward(x + delta)  # only δ is detached: gradient flows into x's graph and the weights
    r_s = divergence(perturbed, reference, regression=regression) * finite
    linf, l2 = sizes(delta)
    return AdversarialResult(r_s, linf, l2, step_to_noise, (~finite).float())


def ascent_signal(
    x: Tensor,
    reference: Tensor,
    forward: ForwardFn,
    mask: Tensor,
    config: MethodConfig,
    regression: bool,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Whether the ascent direction means anything: the cosine of g(ν) and −g(−ν), the ascent gradients
    at a draw ν and at its mirror image. Near δ = 0 the divergence is quadratic, so a gradient made of the
    model's geometry is odd in ν (cosine 1); rounding noise or a second dropout draw is not (cosine ≈ 0)."""
    nu = initial_noise(x.detach(), mask, config.sigma, config.noise, generator)
    target = reference.detach()
    plus = exact_ascent_gradient(x.detach(), nu, target, forward, regression).double().flatten()
    minus = exact_ascent_gradient(x.detach(), -nu, target, forward, regression).double().flatten()
    # Plain formula: F.cosine_similarity clamps ‖a‖·‖b‖ at 1e-8, and these gradients are ~1e-9 at σ = 1e-5.
    cosine: Tensor = -(plus @ minus) / (plus.norm() * minus.norm()).clamp_min(1e-300)
    return cosine.float()
