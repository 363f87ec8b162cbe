"""Divergences between model outputs, computed in (at least) fp32.

One reduction convention everywhere: the mean over the batch of a per-example value
(`batchmean`). Classification outputs are logits (B, C); regression outputs are predictions (B,).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

Reduction = Literal["mean", "sum", "none"]


def _at_least_fp32(x: Tensor) -> Tensor:
    # A 1e-5 perturbation moves logits by ~1e-6: fp16/bf16 cannot represent that difference.
    return x.to(torch.promote_types(x.dtype, torch.float32))


def per_example_symmetric_kl(p_logits: Tensor, q_logits: Tensor) -> Tensor:
    """KL(p‖q) + KL(q‖p) for each example, (B, C) x (B, C) -> (B,). Gradient flows into both inputs."""
    if p_logits.shape != q_logits.shape or p_logits.dim() != 2:
        raise ValueError(
            f"symmetric KL needs two (B, C) logit tensors, got {tuple(p_logits.shape)} and {tuple(q_logits.shape)}"
        )
    log_p = F.log_softmax(_at_least_fp32(p_logits), dim=-1)
    log_q = F.log_softmax(_at_least_fp32(q_logits), dim=-1)
    return ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum(dim=-1)


def symmetric_kl(p_logits: Tensor, q_logits: Tensor) -> Tensor:
    """Batch mean of KL(p‖q) + KL(q‖p) over (B, C) logits; a scalar."""
    return per_example_symmetric_kl(p_logits, q_logits).mean()


def per_example_squared_error(a: Tensor, b: Tensor) -> Tensor:
    """(a − b)² per example for regression predictions (B,) x (B,) -> (B,). Shapes must match exactly."""
    if a.shape != b.shape or a.dim() != 1:
        # mt-dnn's MseCriterion compares [B] with [B, 1] and silently broadcasts to [B, B].
        raise ValueError(f"squared error needs two (B,) tensors, got {tuple(a.shape)} and {tuple(b.shape)}")
    return (_at_least_fp32(a) - _at_least_fp32(b)).pow(2)


def squared_error(a: Tensor, b: Tensor) -> Tensor:
    """Batch mean of (a − b)² over (B,) predictions; a scalar."""
    return per_example_squared_error(a, b).mean()


def divergence(a: Tensor, b: Tensor, *, regression: bool, reduction: Reduction = "mean") -> Tensor:
    """ℓ_s of the paper: symmetric KL for classification logits, squared error for regression.

    reduction: "mean" over the batch (the library's convention), "sum" (per-example gradients that do not
    depend on the batch size: used by the inner ascent), or "none" (B,).
    """
    per_example = per_example_squared_error(a, b) if regression else per_example_symmetric_kl(a, b)
    if reduction == "none":
        return per_example
    return per_example.sum() if reduction == "sum" else per_example.mean()


def task_loss(outputs: Tensor, labels: Tensor, regression: bool) -> Tensor:
    """The supervised loss ℓ: cross-entropy on (B, C) logits, or squared error on (B,) predictions."""
    if regression:
        # Targets in fp32 whatever the outputs' dtype: bf16 would round an STS-B score of 3.8 to 3.796875.
        return squared_error(outputs, labels.to(torch.promote_types(labels.dtype, torch.float32)))
    if outputs.dim() != 2 or labels.shape != outputs.shape[:1]:
        raise ValueError(
            f"classification needs (B, C) logits and (B,) labels, got {tuple(outputs.shape)} and {tuple(labels.shape)}"
        )
    return F.cross_entropy(_at_least_fp32(outputs), labels)
