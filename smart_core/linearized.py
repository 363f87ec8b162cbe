"""R_s's second-order model at δ = 0: SMART's perturbation measured at an arithmetic that cannot add it.

bf16 (and TF32) round x + δ back to x when δ ~ 1e-5 (smart_core.precision), so a plain difference
f(x + δ) − f(x) at that arithmetic is rounding noise. Near δ = 0 it is Jδ (J = ∂f/∂x), and a forward-mode
derivative (a JVP) computes Jδ as a tangent that keeps its own relative precision: no x + δ is ever formed,
nothing cancels. ℓ_s is quadratic there:
    symmetric KL   KL(p‖q) + KL(q‖p) = Δᵀ F Δ + O(Δ³),  F = diag p − p pᵀ,  p = softmax(f(x)),  Δ = Jδ
    squared error  Δ²
so R_s = (1/B) Σ_i Δ_iᵀ F_i Δ_i, and the ascent direction ∇_δ ℓ_s(f(x + δ), sg f(x)) = 2 Jᵀ F J δ (a JVP,
then a VJP with respect to the tangent only: no parameter gradient).

One JVP pass gives f(x) (the primal, the step's clean forward) and Jδ (the tangent), both with graph: the task
loss and R_s's parameter gradient flow from the same pass, R_s's through both J and F as the exact R_s's
gradient flows through both of its forwards. Dropout masks are drawn once per pass and the tangent goes
through the primal's masks, so `shared` holds within a pass; `independent` (a second draw for f(x + δ)) has
no such expression and keeps the exact path (smart_core.precision.step_plan).

Three operators need another formulation inside these passes:
- linear layers run as smart_core.linear's: the forward-mode formula of mm multiplies the weights' (zero,
  materialised) tangent too, a third matmul per layer, and the reverse pass a fourth;
- attention runs as smart_core.attention's: the fused kernels (flash, memory-efficient, the CPU flash kernel)
  have no forward-mode derivative (pytorch/pytorch#117629, #128971), and SDPA's math backend, which has one,
  keeps five or six (B, heads, T, T) tensors per layer for the backward;
- layer norm runs as smart_core.layer_norm's in the pass whose tangent is differentiated with
  respect to the weights: native_layer_norm's forward-mode formula treats its saved mean and rstd as
  constants, so a reverse pass through its tangent misses their dependence on the input and R_s's gradient
  to every weight before the last layer norm is wrong (cosine 0.7-0.9 on a tiny BERT; pytorch/pytorch#196700).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd import forward_ad

from smart_core import fused
from smart_core.adversarial import AdversarialResult, GradientFn, ascend
from smart_core.attention import LightAttention
from smart_core.config import MethodConfig
from smart_core.divergences import Reduction
from smart_core.layer_norm import layer_norm
from smart_core.linear import LightLinear
from smart_core.perturbation import sizes
from smart_core.softmax import log_softmax, softmax
from smart_core.substitution import Substituting

ForwardFn = Callable[[Tensor], Tensor]  # embeddings (B, T, H) -> logits (B, C) or predictions (B,)
_TINY = 1e-30


class LightLayerNorm(Substituting):
    """Runs F.layer_norm and torch.layer_norm as smart_core.layer_norm's (module docstring)."""

    replacements = {F.layer_norm: layer_norm, torch.layer_norm: layer_norm}


# What a JVP pass runs as this module's operators besides attention (one mode: every torch call inside pays one
# Python hop per mode); attention is `LightAttention`, a name of this module that research.attention_cost swaps
JVP_PASS: dict[Callable[..., Any], Callable[..., Any]] = {
    **LightLinear.replacements, F.softmax: softmax, torch.softmax: softmax, Tensor.softmax: softmax,
    F.log_softmax: log_softmax, torch.log_softmax: log_softmax, Tensor.log_softmax: log_softmax,
}  # fmt: skip
JVP_PASS_NORMS = {**JVP_PASS, **LightLayerNorm.replacements}


def jvp(
    forward: ForwardFn, x: Tensor, tangent: Tensor, *, through_primal: bool = True, dual: bool = True
) -> tuple[Tensor, Tensor]:
    """(f(x), J·tangent) from one pass, both with whatever graph x, the weights and `tangent` carry.

    `through_primal`: a reverse pass will differentiate the tangent with respect to x or the weights (R_s's
    parameter gradient), so layer norms run as smart_core.layer_norm's; False when only `tangent` is differentiated
    (the ascent's VJP), which the fused layer norm gets right. The tangent enters at unit RMS and is scaled
    back in fp32 after: J is linear, and a 1e-5 tangent would sit near fp16's subnormals. Outputs: the primal
    at the forward's dtype, the tangent in fp32, each (B, C) or (B,).

    `dual`: the pass runs on dual tensors (torch.autograd.forward_ad), whose custom functions cost less host
    time per call than under `torch.func.jvp` (MiniLM-L6 at 1 x 8 tokens on CPU, a linearised step's loss and
    backward: 192 ms against 276 ms; vanilla's 51 ms). A compiled module drops a dual tensor's tangent
    (torch 2.13's dynamo): a forward that runs one needs `dual=False`, the functorch transform, which it traces.
    """
    scale = tangent.detach().float().pow(2).mean().sqrt().clamp_min(_TINY)  # a scalar: RMS of the tangent
    # compiled (smart_core.fused), smart_core.layer_norm's tangent takes fewer launches than native layer norm's
    # forward-mode formula; asked for, not only running compiled, so that bench.flops counts the GPU's structure
    substitutes = JVP_PASS_NORMS if through_primal or fused.wanted(x.device) else JVP_PASS
    with LightAttention(), Substituting(substitutes):
        if not dual:
            out = torch.func.jvp(forward, (x,), (tangent / scale,))  # (primal, tangent): no aux
            return out[0], out[1].float() * scale
        with forward_ad.dual_level():
            dual_x = forward_ad.make_dual(x, tangent / scale)  # type: ignore[no-untyped-call]
            primal, moved = forward_ad.unpack_dual(forward(dual_x))  # type: ignore[no-untyped-call]
    if moved is None:
        raise RuntimeError(
            "the forward lost the JVP's tangent: a compiled module runs it only with dual=False"
        )
    return primal, moved.float() * scale


def quadratic_divergence(
    clean: Tensor, moved: Tensor, *, regression: bool, reduction: Reduction = "mean"
) -> Tensor:
    """ℓ_s(f(x) + Δ, f(x)) to second order in Δ = `moved`: Δᵀ F Δ per example, the variance of Δ under
    p = softmax(f(x)) (B, C) -> (B,), or Δ² for regression (B,) -> (B,); reduced as smart_core.divergences
    reduces (batch mean by default). fp32 at least; gradient flows into both `clean` (through F) and `moved`."""
    if clean.shape != moved.shape or clean.dim() != (1 if regression else 2):
        raise ValueError(
            f"the quadratic form needs two {'(B,)' if regression else '(B, C)'} tensors, got "
            f"{tuple(clean.shape)} and {tuple(moved.shape)}"
        )
    d = moved.to(torch.promote_types(moved.dtype, torch.float32))
    if regression:
        per_example = d.pow(2)
    else:
        p = F.softmax(clean.to(d.dtype), dim=-1)  # (B, C)
        centred = d - (p * d).sum(dim=-1, keepdim=True)  # Δ − E_p[Δ]: F Δ = p ⊙ (Δ − E_p[Δ])
        per_example = (p * centred.pow(2)).sum(dim=-1)  # Δᵀ F Δ = E_p[(Δ − E_p[Δ])²] >= 0
    if reduction == "none":
        return per_example
    return per_example.sum() if reduction == "sum" else per_example.mean()


def linear_ascent_gradient(
    x: Tensor,
    delta: Tensor,
    target: Tensor | None,
    forward: ForwardFn,
    regression: bool,
    *,
    dual: bool = True,
) -> Tensor:
    """∇_δ ℓ_s(f(x + δ), sg f(x)) to first order in δ: 2 Jᵀ F J δ (B, T, H) fp32, per example ("sum", as the
    exact ascent gradient). F comes from this pass's own f(x) (`target` is unused: the pass computes it, at
    the same dropout masks); the VJP is taken with respect to the tangent only, so no parameter .grad is
    touched and no parameter graph outlives the call. `dual`: as `jvp`'s."""
    del target
    tangent = delta.detach().float().requires_grad_(True)
    clean, moved = jvp(forward, x.detach(), tangent, through_primal=False, dual=dual)
    value = quadratic_divergence(clean.detach(), moved, regression=regression, reduction="sum")
    (grad,) = torch.autograd.grad(value, tangent)
    return grad


def linearized_regularizer(
    x: Tensor,
    forward: ForwardFn,
    mask: Tensor,
    config: MethodConfig,
    regression: bool,
    generator: torch.Generator | None = None,
    *,
    outer_forward: ForwardFn | None = None,
    noise: Tensor | None = None,
    gradient: GradientFn = linear_ascent_gradient,
    dual: bool = True,
) -> tuple[Tensor, AdversarialResult]:
    """R_s with its ascent and its value linearised: (f(x) (B, C) or (B,), the JVP pass's primal with graph;
    R_s = (1/B) Σ_i (J δ_i)ᵀ F_i (J δ_i), with graph through J and F). `forward` runs the ascent's passes,
    `outer_forward` (default `forward`) the final one: under `shared` dropout the ascent replays the masks
    that the final pass, the step's clean forward, draws. `noise`: ν already drawn (else drawn here).
    `gradient`: the ascent's (linear_ascent_gradient, or it with the weights frozen). `dual`: as `jvp`'s, for
    the final pass."""
    delta, step_to_noise, finite = ascend(
        x, None, forward, mask, config, regression, generator, gradient=gradient, noise=noise
    )
    reference, moved = jvp(outer_forward or forward, x, delta, dual=dual)
    r_s = quadratic_divergence(reference, moved, regression=regression) * finite
    linf, l2 = sizes(delta)
    return reference, AdversarialResult(r_s, linf, l2, step_to_noise, (~finite).float())
