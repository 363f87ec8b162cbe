"""Independent transcriptions of the papers' formulas, for the tests to compare smart_core against.

Nothing here imports smart_core: every formula is written out again from its paper, in float64 where the
inputs allow, so a bug shared by the library and its reference cannot cancel out.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def softmax64(logits: Tensor) -> Tensor:
    z = logits.double()
    e = torch.exp(z - z.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def sym_kl(p_logits: Tensor, q_logits: Tensor) -> Tensor:
    """(1/B) Σ_i [Σ_c p_ic log(p_ic/q_ic) + Σ_c q_ic log(q_ic/p_ic)], float64, graph into both inputs."""
    p, q = softmax64(p_logits), softmax64(q_logits)
    kl_pq = (p * torch.log(p / q)).sum(dim=-1)
    kl_qp = (q * torch.log(q / p)).sum(dim=-1)
    return (kl_pq + kl_qp).sum() / p.shape[0]


def squared(a: Tensor, b: Tensor) -> Tensor:
    """(1/B) Σ_i (a_i − b_i)², float64."""
    return ((a.double() - b.double()) ** 2).sum() / a.shape[0]


def cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """(1/B) Σ_i −log softmax(z_i)[y_i], float64."""
    p = softmax64(logits)
    return -torch.log(p[torch.arange(p.shape[0]), labels]).sum() / p.shape[0]


def loss_fn(regression: bool) -> Callable[[Tensor, Tensor], Tensor]:
    return squared if regression else cross_entropy


def divergence(a: Tensor, b: Tensor, regression: bool) -> Tensor:
    return squared(a, b) if regression else sym_kl(a, b)


def grads(value: Tensor, params: list[Tensor]) -> list[Tensor]:
    """∂value/∂p for each p (zeros where unused); .grad untouched."""
    out = torch.autograd.grad(value, params, retain_graph=True, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, out, strict=True)]


def mask3(mask: Tensor, like: Tensor) -> Tensor:
    return mask.to(like.dtype).unsqueeze(-1)


def example_norm(g: Tensor, p: str) -> Tensor:
    """‖g_i‖_p over each example's (T, H) block, shaped (B, 1, 1)."""
    flat = g.reshape(g.shape[0], -1)
    value = flat.abs().max(dim=1).values if p == "inf" else torch.sqrt((flat**2).sum(dim=1))
    return value.view(-1, 1, 1)


def project_example_ball(delta: Tensor, p: str, radius: float) -> Tensor:
    """Euclidean projection onto {‖δ_i‖_p ≤ radius}: a clamp for ∞, a rescale for 2."""
    if p == "inf":
        return torch.clamp(delta, -radius, radius)
    n = example_norm(delta, "2")
    return torch.where(n > radius, delta * radius / n, delta)
