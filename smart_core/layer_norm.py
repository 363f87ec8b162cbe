"""Layer norm with a forward-mode derivative whose reverse pass sees the statistics' dependence on the input.

A linearised step's final pass (smart_core.linearized) differentiates the tangent Jδ with respect to the weights.
native_layer_norm's forward-mode formula treats its saved mean and rstd as constants, so a reverse pass through
its tangent misses their dependence on the input (R_s's gradient came out at cosine 0.84; pytorch/pytorch#196700).
Written out as plain ops it is right but keeps about seven token × H fp32 tensors per norm for the primal and
its tangent (two norms a layer: a third of the linearised step's peak). Here it is a `torch.autograd.Function`
that keeps only its input and the input's tangent and recomputes the rest in the backward:
    y  = x̂·w + b,                        x̂ = (x − μ)·r,  r = 1/√(var(x) + eps)
    dy = r·(dc − x̂·mean(x̂·dc))·w + x̂·dw + db,   dc = dx − mean(dx)
At the dtype autocast gives layer norm (fp32 at least under autocast), decided at the call and kept by the
backward, which may run outside autocast.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

Optional = Tensor | None


def _statistics(x: Tensor, dims: tuple[int, ...], eps: float) -> tuple[Tensor, Tensor]:
    """(x̂, r): the normalised input and 1/√(var + eps) over the trailing `dims`."""
    centred = x - x.mean(dim=dims, keepdim=True)
    rstd = torch.rsqrt(centred.pow(2).mean(dim=dims, keepdim=True) + eps)
    return centred * rstd, rstd


def _output(
    x: Tensor, w: Optional, b: Optional, dims: tuple[int, ...], eps: float, dtype: torch.dtype
) -> Tensor:
    with torch.autocast(x.device.type, enabled=False):
        out, _ = _statistics(x.to(dtype), dims, eps)
        if w is not None:
            out = out * w.to(dtype)
        return out + b.to(dtype) if b is not None else out


def _tangent(
    x: Tensor, w: Optional, dx: Tensor, dw: Optional, db: Optional,
    dims: tuple[int, ...], eps: float, dtype: torch.dtype,
) -> Tensor:  # fmt: skip
    """dy along (dx, dw, db), at `dtype`."""
    with torch.autocast(x.device.type, enabled=False):
        normalised, rstd = _statistics(x.to(dtype), dims, eps)
        dc = dx.to(dtype) - dx.to(dtype).mean(dim=dims, keepdim=True)
        out = rstd * (dc - normalised * (normalised * dc).mean(dim=dims, keepdim=True))
        if w is not None:
            out = out * w.to(dtype)
        if dw is not None:
            out = out + normalised * dw.to(dtype)
        return out + db.to(dtype) if db is not None else out


def _recomputed(fn: Callable[..., Tensor], tensors: Sequence[Optional], grad: Tensor) -> list[Optional]:
    """The gradient of ⟨fn(*tensors), grad⟩ with respect to each tensor given (None stays None)."""
    leaves = [None if t is None else t.detach().requires_grad_(True) for t in tensors]
    with torch.enable_grad():
        out = fn(*leaves)
    present = [t for t in leaves if t is not None]
    grads = iter(torch.autograd.grad(out, present, grad, allow_unused=True))
    found = [None if t is None else next(grads) for t in leaves]
    return [
        torch.zeros_like(t) if g is None and t is not None else g for g, t in zip(found, leaves, strict=True)
    ]


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(
        x: Tensor, w: Optional, b: Optional, dims: tuple[int, ...], eps: float, dtype: torch.dtype
    ) -> Tensor:
        return _output(x, w, b, dims, eps, dtype)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        x, w, b, dims, eps, dtype = inputs
        ctx.save_for_backward(x, w, b)
        ctx.save_for_forward(x, w)
        ctx.dims, ctx.eps, ctx.dtype = dims, eps, dtype

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Optional, ...]:
        x, w, b = ctx.saved_tensors

        def output(x: Tensor, w: Optional, b: Optional) -> Tensor:
            return _output(x, w, b, ctx.dims, ctx.eps, ctx.dtype)

        return (*_recomputed(output, (x, w, b), grad), None, None, None)

    @staticmethod
    def jvp(ctx: Any, dx: Optional, dw: Optional, db: Optional, *_: Any) -> Tensor:
        x, w = ctx.saved_tensors
        dx = torch.zeros_like(x) if dx is None else dx
        out: Tensor = _LayerNormTangent.apply(x, w, dx, dw, db, ctx.dims, ctx.eps, ctx.dtype)  # type: ignore[no-untyped-call]
        return out


class _LayerNormTangent(torch.autograd.Function):
    @staticmethod
    def forward(
        x: Tensor, w: Optional, dx: Tensor, dw: Optional, db: Optional,
        dims: tuple[int, ...], eps: float, dtype: torch.dtype,
    ) -> Tensor:  # fmt: skip
        return _tangent(x, w, dx, dw, db, dims, eps, dtype)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        x, w, dx, dw, db, dims, eps, dtype = inputs
        ctx.save_for_backward(x, w, dx, dw, db)
        ctx.dims, ctx.eps, ctx.dtype = dims, eps, dtype

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Optional, ...]:
        def tangent(x: Tensor, w: Optional, dx: Tensor, dw: Optional, db: Optional) -> Tensor:
            return _tangent(x, w, dx, dw, db, ctx.dims, ctx.eps, ctx.dtype)

        return (*_recomputed(tangent, ctx.saved_tensors, grad), None, None, None)


def layer_norm(
    input: Tensor,
    normalized_shape: Sequence[int],
    weight: Optional = None,
    bias: Optional = None,
    eps: float = 1e-5,
    *_: Any,
) -> Tensor:
    """`F.layer_norm`'s contract, computed as the module docstring says."""
    dtype = input.dtype
    if torch.is_autocast_enabled(input.device.type):
        dtype = torch.promote_types(dtype, torch.float32)
    dims = tuple(range(-len(normalized_shape), 0))  # the trailing normalised dimensions
    out: Tensor = _LayerNorm.apply(input, weight, bias, dims, eps, dtype)  # type: ignore[no-untyped-call]
    return out
