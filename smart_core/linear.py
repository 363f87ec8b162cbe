"""Linear layers whose forward-mode derivative multiplies the input's tangent only.

PyTorch's forward-mode formula for addmm and mm is x'·Wᵀ + x·W'ᵀ, and under a JVP (`torch.func.jvp`, or dual
tensors) a weight that carries no tangent gets a zero one that is materialised and multiplied. So every linear
layer of a JVP pass ran three matmuls instead of two, and the reverse pass through the tangent a fourth:
a linearised SMART step (smart_core.linearized) cost 4.55x vanilla's matmul FLOPs where its passes need about
3.5x (MiniLM-L6, 16 x 128, bench.flops). A linearised step's weights never carry a tangent (δ, entering at the
embeddings, is the only one), so here a linear layer is a `torch.autograd.Function` whose tangent skips the zero terms:
    y = x Wᵀ + b,   y' = x' Wᵀ (+ x W'ᵀ + b' where the weights do carry a tangent)
The tangent is computed with plain differentiable ops, so a reverse pass through it reaches x' and W as it
did. Under autocast the operands are cast as autocast casts a linear layer's (to its dtype) before the call.

Autocast's own weight cache does not reach these casts, so each pass cast every weight and bias again: 76
casts a pass at MiniLM-L6, two passes a linearised step. Inside `casts_shared(module)` (the step's passes)
each of the module's linear weights is cast once, with graph, and reused: as it is by a pass that trains the
weights, detached by one that froze them (smart_core.adversarial.weights_frozen); a weight changed in place
since is cast again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, TypeGuard

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from smart_core.substitution import Substituting

Optional = Tensor | None


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(x: Tensor, w: Tensor, b: Optional) -> Tensor:
        return F.linear(x, w, b)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        x, w, b = inputs
        # as mm keeps them: x only for W's gradient, W only for x's (a frozen weight keeps no activation)
        ctx.save_for_backward(x if w.requires_grad else None, w if x.requires_grad else None)
        ctx.save_for_forward(x, w)
        ctx.set_materialize_grads(False)  # a missing tangent (or gradient) comes as None, not as zeros
        ctx.has_bias, ctx.shape, ctx.dtype = b is not None, output.shape, output.dtype

    @staticmethod
    def backward(ctx: Any, grad: Optional) -> tuple[Optional, ...]:
        if grad is None:  # the output reached nothing that is differentiated
            return None, None, None
        x, w = ctx.saved_tensors
        rows = grad.reshape(-1, grad.shape[-1])  # (N, out)
        dx = grad @ w if ctx.needs_input_grad[0] else None  # (..., out) @ (out, in)
        dw = rows.t() @ x.reshape(-1, x.shape[-1]) if ctx.needs_input_grad[1] else None  # (out, in)
        db = rows.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dw, db

    @staticmethod
    def jvp(ctx: Any, dx: Optional, dw: Optional, db: Optional) -> Tensor:
        x, w = ctx.saved_tensors
        # y' = x'Wᵀ + x W'ᵀ + b', each term only where its tangent exists: a weight without one comes as None
        # (set_materialize_grads(False)) or as torch's lazy zero tensor, never multiplied
        terms = [F.linear(dx, w)] if _present(dx) else []
        terms += [F.linear(x, dw)] if _present(dw) else []
        terms += [db.expand(ctx.shape)] if _present(db) else []  # (out,) -> the output's shape
        if not terms:  # an input that does not depend on the perturbation
            return torch.zeros(ctx.shape, dtype=ctx.dtype, device=w.device)
        return sum(terms[1:], terms[0])


def _present(tangent: Optional) -> TypeGuard[Tensor]:
    return tangent is not None and not tangent._is_zerotensor()


_SHARED: ContextVar[dict[int, tuple[Tensor, int, Tensor]] | None] = ContextVar(
    "smart_core_linear_casts", default=None
)


@contextlib.contextmanager
def casts_shared(module: nn.Module | None) -> Iterator[None]:
    """While active, `linear` takes each weight and bias of `module`'s nn.Linear layers as cast here, once, to
    the autocast dtype of their device (module docstring). Cast on entry, outside any pass: a pass that froze
    the weights, or one inside a functorch transform, could not make a cast with graph. Nothing is cast or
    shared outside autocast."""
    params = [p for layer in (module.modules() if module is not None else ()) if isinstance(layer, nn.Linear)
              for p in layer.parameters(recurse=False) if p.is_floating_point()]  # fmt: skip
    device = params[0].device.type if params else "cpu"
    if not params or not torch.is_autocast_enabled(device):
        yield
        return
    dtype = torch.get_autocast_dtype(device)
    with torch.enable_grad():  # (param, its version when cast, the cast): an in-place update makes it stale
        casts: dict[int, tuple[Tensor, int, Tensor]] = {id(p): (p, p._version, p.to(dtype)) for p in params}
    token = _SHARED.set(casts)
    try:
        yield
    finally:
        _SHARED.reset(token)


def _cast(param: Tensor, dtype: torch.dtype) -> Tensor:
    """`param.to(dtype)`, or within `casts_shared` its shared cast (detached for a pass that froze it)."""
    casts = _SHARED.get()
    entry = casts.get(id(param)) if casts is not None and not torch.compiler.is_compiling() else None
    if entry is None or entry[0] is not param or entry[1] != param._version or entry[2].dtype != dtype:
        return param.to(dtype)
    return entry[2] if param.requires_grad else entry[2].detach()


def linear(input: Tensor, weight: Tensor, bias: Optional = None) -> Tensor:
    """`F.linear`'s contract, with the forward-mode derivative of the module docstring."""
    device = input.device.type
    if torch.is_autocast_enabled(device) and input.is_floating_point():
        dtype = torch.get_autocast_dtype(device)  # autocast runs linear at its lower precision
        input, weight = input.to(dtype), _cast(weight, dtype)
        bias = _cast(bias, dtype) if bias is not None else None
    with torch.autocast(device, enabled=False):
        out: Tensor = _Linear.apply(input, weight, bias)  # type: ignore[no-untyped-call]
    return out


class LightLinear(Substituting):
    """Runs F.linear (every nn.Linear) as smart_core.linear's while active: for the JVP passes."""

    replacements = {F.linear: linear}
