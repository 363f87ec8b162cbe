"""Perturbation arithmetic on embedding-layer outputs: init, gradient normalisation, projection.

Shapes: a perturbation δ and its gradient g are (B, T, H) and fp32; `mask` is (B, T) with 1 on real
tokens and 0 on padding. Padding positions are never perturbed: every function re-applies the mask.
"""

from __future__ import annotations

import torch
from torch import Tensor

from smart_core.config import GradNorm, NoiseDist, NormP, Projection

_TINY = 1e-30  # keeps an all-zero gradient at zero instead of 0/0


def _mask3(mask: Tensor, like: Tensor) -> Tensor:
    return mask.to(device=like.device, dtype=like.dtype).unsqueeze(-1)  # (B, T, 1)


def gaussian_init(
    like: Tensor, mask: Tensor, sigma: float, generator: torch.Generator | None = None
) -> Tensor:
    """ν ~ N(0, σ²I) of the shape of `like`, fp32, zero on padding. One draw of B·T·H normals."""
    noise = torch.randn(like.shape, generator=generator, device=like.device, dtype=torch.float32)
    return noise * sigma * _mask3(mask, noise)


def initial_noise(
    like: Tensor, mask: Tensor, sigma: float, dist: NoiseDist, generator: torch.Generator | None = None
) -> Tensor:
    """ν of the shape of `like`, fp32, zero on padding: N(0, σ²) (SMART) or U(−σ, σ) (R3F's default)."""
    if dist == "normal":
        return gaussian_init(like, mask, sigma, generator)
    u = torch.rand(like.shape, generator=generator, device=like.device, dtype=torch.float32) * 2 - 1
    return u * sigma * _mask3(mask, u)


def uniform_init(
    like: Tensor, mask: Tensor, magnitude: float, norm: str, generator: torch.Generator | None = None
) -> Tensor:
    """FreeLB's init: U(−1, 1) on real tokens, scaled to `magnitude` (ℓ∞) or magnitude/√(len·H) (ℓ2)."""
    m = mask.to(device=like.device, dtype=torch.float32)
    u = (
        torch.rand(like.shape, generator=generator, device=like.device, dtype=torch.float32) * 2 - 1
    ) * m.unsqueeze(-1)
    if norm == "inf":
        return u * magnitude
    lengths = m.sum(dim=1).clamp_min(1.0)  # (B,)
    return u * (magnitude / torch.sqrt(lengths * like.shape[-1])).view(-1, 1, 1)


def normalize_gradient(g: Tensor, mode: GradNorm) -> Tensor:
    """Scale g (B, T, H) by a per-example or per-token norm (Algorithm 1 line 8 is per-example ℓ∞)."""
    if mode == "none":
        return g
    if mode == "example-inf":
        norm = g.abs().amax(dim=(1, 2), keepdim=True)  # (B, 1, 1)
    elif mode == "token-inf":
        norm = g.abs().amax(dim=-1, keepdim=True)  # (B, T, 1): what the official code does
    elif mode == "example-l2":
        norm = g.pow(2).sum(dim=(1, 2), keepdim=True).sqrt()  # (B, 1, 1)
    else:
        raise ValueError(f"unknown gradient normalisation {mode!r}")
    return g / norm.clamp_min(_TINY)


def project(
    delta: Tensor, mask: Tensor, rule: Projection, p: NormP, epsilon: float, stabilizer: float
) -> Tensor:
    """Map a stepped perturbation back to the feasible set.

    ball:   Proj onto {‖δ_i‖_p ≤ ε}: an element-wise clamp to ±ε for p = ∞, a per-example rescale for p = 2.
    renorm: δ / (‖δ‖_p per token + stabilizer): the official mt-dnn "projection"; each token ends with
            norm ≈ 1, a perturbation as large as the LayerNorm-ed embedding itself (docs/architecture.md §4).
    """
    if rule == "ball":
        if p == "inf":
            out = delta.clamp(-epsilon, epsilon)
        else:
            norms = delta.pow(2).sum(dim=(1, 2), keepdim=True).sqrt()  # (B, 1, 1)
            out = delta * (epsilon / norms.clamp_min(_TINY)).clamp(max=1.0)
    elif rule == "renorm":
        if p == "inf":
            norms = delta.abs().amax(dim=-1, keepdim=True)  # (B, T, 1)
        else:
            norms = delta.pow(2).sum(dim=-1, keepdim=True).sqrt()
        out = delta / (norms + stabilizer).clamp_min(_TINY)  # padding: 0 / tiny = 0, not NaN
    else:
        raise ValueError(f"unknown projection {rule!r}")
    return out * _mask3(mask, out)


def project_max_norm(delta: Tensor, mask: Tensor, norm: str, max_norm: float) -> Tensor:
    """FreeLB / PGD projection: ‖δ_i‖ ≤ max_norm per example (ℓ2) or a clamp (ℓ∞); 0 disables it."""
    if max_norm <= 0:
        return delta * _mask3(mask, delta)
    p: NormP = "inf" if norm == "inf" else "2"
    return project(delta, mask, "ball", p, max_norm, 0.0)


def sizes(delta: Tensor) -> tuple[Tensor, Tensor]:
    """(max |δ| over the batch, mean over examples of ‖δ_i‖_2): the applied perturbation's size, detached."""
    d = delta.detach()
    return d.abs().amax(), d.pow(2).sum(dim=(1, 2)).sqrt().mean()
