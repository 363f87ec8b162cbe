"""Layer norm with a forward-mode derivative whose reverse pass sees the statistics' dependence on the input.

A linearised step's final pass (smart_core.linearized) differentiates the tangent Jδ with respect to the weights.
native_layer_norm's forward-mode formula treats its saved mean and rstd as constants, so a reverse pass through
its tangent misses their dependence on the input (R_s's gradient came out at cosine 0.84; pytorch/pytorch#196700).
Written out as plain ops it is right but keeps about seven token × H fp32 tensors per norm for the primal and
its tangent (two norms a layer: a third of the linearised step's peak). Here it is a `torch.autograd.Function`
whose primal runs the fused kernels (forward and backward) and whose tangent keeps only the input and the input's
tangent and recomputes the rest in its backward:
    y  = x̂·w + b,                        x̂ = (x − μ)·r,  r = 1/√(var(x) + eps)
    dy = r·(dc − x̂·mean(x̂·dc))·w + x̂·dw + db,   dc = dx − mean(dx)
At the dtype autocast gives layer norm (fp32 at least under autocast), decided at the call and kept by the
backward, which may run outside autocast. The tangent and its gradient run compiled on a GPU (smart_core.fused:
a few kernels each where eager takes about 12 and 37 launches).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from smart_core import fused

Optional = Tensor | None


def _statistics(x: Tensor, dims: tuple[int, ...], eps: float) -> tuple[Tensor, Tensor]:
    """(x̂, r): the normalised input and 1/√(var + eps) over the trailing `dims`."""
    centred = x - x.mean(dim=dims, keepdim=True)
    rstd = torch.rsqrt(centred.pow(2).mean(dim=dims, keepdim=True) + eps)
    return centred * rstd, rstd


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


class _LayerNorm(torch.autograd.Function):
    """The primal by the fused kernels, forward and backward (one launch each, where the written-out norm took
    about nine and its recomputed gradient fifteen more); only the tangent is written out (`_LayerNormTangent`).
    No reverse pass differentiates the primal's own backward, so the fused one is exact for it."""

    @staticmethod
    def forward(
        x: Tensor, w: Optional, b: Optional, dims: tuple[int, ...], eps: float, dtype: torch.dtype
    ) -> tuple[Tensor, Tensor, Tensor]:
        shape = x.shape[len(x.shape) - len(dims) :]
        with torch.autocast(x.device.type, enabled=False):
            weight, bias = (None if t is None else t.to(dtype) for t in (w, b))
            out, mean, rstd = torch.native_layer_norm(x.to(dtype), shape, weight, bias, eps)
        return out, mean, rstd

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor, Tensor]) -> None:
        x, w, b, dims, eps, dtype = inputs
        ctx.save_for_backward(x, w, b, output[1], output[2])  # mean and rstd: (..., 1) each
        ctx.save_for_forward(x, w)
        ctx.mark_non_differentiable(output[1], output[2])
        # a missing tangent (the weights') or gradient (mean's, rstd's) comes as None, not as zeros made for it
        ctx.set_materialize_grads(False)
        ctx.dims, ctx.eps, ctx.dtype = dims, eps, dtype

    @staticmethod
    def backward(ctx: Any, grad: Optional, *_: Any) -> tuple[Optional, ...]:
        if grad is None:  # the output reached nothing that is differentiated
            return (None,) * 6
        x, w, b, mean, rstd = ctx.saved_tensors
        shape = x.shape[len(x.shape) - len(ctx.dims) :]
        needed = [ctx.needs_input_grad[0], w is not None and ctx.needs_input_grad[1],
                  b is not None and ctx.needs_input_grad[2]]  # fmt: skip
        cast = [None if t is None else t.to(ctx.dtype) for t in (grad, x, w, b)]
        dx, dw, db = torch.ops.aten.native_layer_norm_backward(
            *cast[:2], shape, mean, rstd, *cast[2:], needed
        )
        return dx, dw, db, None, None, None

    @staticmethod
    def jvp(ctx: Any, dx: Optional, dw: Optional, db: Optional, *_: Any) -> tuple[Tensor, None, None]:
        x, w = ctx.saved_tensors
        dx = torch.zeros_like(x) if dx is None else dx  # only the weights carry a tangent (no pass of ours)
        dw, db = (None if t is None or t._is_zerotensor() else t for t in (dw, db))
        out: Tensor = _LayerNormTangent.apply(x, w, dx, dw, db, ctx.dims, ctx.eps, ctx.dtype)  # type: ignore[no-untyped-call]
        return out, None, None


class _LayerNormTangent(torch.autograd.Function):
    @staticmethod
    def forward(
        x: Tensor, w: Optional, dx: Tensor, dw: Optional, db: Optional,
        dims: tuple[int, ...], eps: float, dtype: torch.dtype,
    ) -> Tensor:  # fmt: skip
        return fused.function(_tangent)(x, w, dx, dw, db, dims, eps, dtype)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        x, w, dx, dw, db, dims, eps, dtype = inputs
        ctx.save_for_backward(x, w, dx, dw, db)
        ctx.dims, ctx.eps, ctx.dtype = dims, eps, dtype

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Optional, ...]:
        saved = ctx.saved_tensors  # x, w, dx, dw, db
        needed = [t is not None and ctx.needs_input_grad[i] for i, t in enumerate(saved)]
        if not any(needed):
            return (None,) * 8
        grads = iter(fused.vjp(_tangent, needed)(*saved, ctx.dims, ctx.eps, ctx.dtype, grad))
        return (*(next(grads) if n else None for n in needed), None, None, None)


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
    out: Tensor = _LayerNorm.apply(input, weight, bias, dims, eps, dtype)[0]  # type: ignore[no-untyped-call]
    return out
