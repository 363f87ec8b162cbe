"""Softmax and log-softmax whose tangents a reverse pass can differentiate: for the linearised step's dual-tensor
JVP passes.

smart_core.linearized pushes the tangent through the model with dual tensors (torch.autograd.forward_ad), and
then differentiates that tangent (R_s's parameter gradient, the ascent's VJP). PyTorch's forward-mode formulas
for softmax, log-softmax and logsumexp write into a tensor that the reverse pass needs ("modified by an inplace
operation", torch 2.13), so a model whose attention computes its own softmax (HF `eager` attention) fails there
(logsumexp is not substituted: no encoder's forward calls it). Here the value is torch's own, run under whatever
autocast is active (CUDA autocast runs it in fp32, CPU autocast at the input's dtype), and the tangent is formed
from plain differentiable ops:
    p = softmax(x),   p' = p ⊙ (x' − Σ_j p_j x'_j),   (log p)' = x' − Σ_j p_j x'_j
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


class _OverDim(torch.autograd.Function):
    """What softmax and log-softmax keep: their output (p or log p), the dim and the input's dtype."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        ctx.dim, ctx.input_dtype = inputs[1], inputs[0].dtype
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)


class _Softmax(_OverDim):
    @staticmethod
    def forward(x: Tensor, dim: int, dtype: torch.dtype | None) -> Tensor:
        return torch.softmax(x, dim, dtype=dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None]:
        (p,) = ctx.saved_tensors
        dx = p * (grad - (grad * p).sum(ctx.dim, keepdim=True))  # the softmax's VJP, differentiable
        return dx.to(ctx.input_dtype), None, None

    @staticmethod
    def jvp(ctx: Any, dx: Tensor, *_: Any) -> Tensor:  # x is the one input with a tangent
        (p,) = ctx.saved_tensors
        dx = dx.to(p.dtype)
        out: Tensor = p * (dx - (p * dx).sum(ctx.dim, keepdim=True))
        return out


def softmax(
    input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: torch.dtype | None = None
) -> Tensor:
    """`F.softmax`'s contract (an explicit `dim`), with the tangent of the module docstring."""
    if dim is None:
        raise ValueError("softmax in a linearised pass needs an explicit dim")
    out: Tensor = _Softmax.apply(input, dim, dtype)  # type: ignore[no-untyped-call]
    return out


class _LogSoftmax(_OverDim):
    @staticmethod
    def forward(x: Tensor, dim: int, dtype: torch.dtype | None) -> Tensor:
        return torch.log_softmax(x, dim, dtype=dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None]:
        (log_p,) = ctx.saved_tensors
        dx = grad - log_p.exp() * grad.sum(ctx.dim, keepdim=True)  # the log-softmax's VJP, differentiable
        return dx.to(ctx.input_dtype), None, None

    @staticmethod
    def jvp(ctx: Any, dx: Tensor, *_: Any) -> Tensor:  # x is the one input with a tangent
        (log_p,) = ctx.saved_tensors
        dx = dx.to(log_p.dtype)
        out: Tensor = dx - (log_p.exp() * dx).sum(ctx.dim, keepdim=True)
        return out


def log_softmax(
    input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: torch.dtype | None = None
) -> Tensor:
    """`F.log_softmax`'s contract (an explicit `dim`), with the tangent of the module docstring."""
    if dim is None:
        raise ValueError("log_softmax in a linearised pass needs an explicit dim")
    out: Tensor = _LogSoftmax.apply(input, dim, dtype)  # type: ignore[no-untyped-call]
    return out
