"""smart_core.linear: a linear layer whose forward-mode derivative multiplies the input's tangent only."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch import Tensor

from smart_core.linear import LightLinear, _Linear, casts_shared, linear

from .op_count import OpCount

# The FLOP counter is the benchmarks' (bench/flops.py); skipped where only smart_core is importable.
DtypeFlops = pytest.importorskip("bench.flops").DtypeFlops

IN, OUT = 12, 7


def _Casts() -> OpCount:
    return OpCount(torch.ops.aten._to_copy)


def _tensors(bias: bool, dims: int) -> list[Tensor]:
    """x, x' (dims-D, fp64), W, b (or None)."""
    gen = torch.Generator().manual_seed(0)
    shape = (3, 5, IN) if dims == 3 else (4, IN)
    x, dx = (torch.randn(*shape, dtype=torch.float64, generator=gen) for _ in range(2))
    w = torch.randn(OUT, IN, dtype=torch.float64, generator=gen)
    b = torch.randn(OUT, dtype=torch.float64, generator=gen) if bias else None
    return [x, dx, w, b]  # type: ignore[list-item]


def _all(fn: Callable[..., Tensor], bias: bool, dims: int) -> list[Tensor]:
    """[y, y', then the gradient of a loss of both with respect to x, x', W (and b)]: the weights enter as a
    model's do, outside the JVP's inputs, as the linearised step's final pass sees them."""
    x, dx, w, b = _tensors(bias, dims)
    leaves = [t.requires_grad_(True) for t in (x, dx, w, *([b] if bias else []))]
    out, tangent = torch.func.jvp(lambda a: fn(a, w, b), (x,), (dx,))
    loss = (tangent**2).sum() + (out * 1.3).sum()
    return [out.detach(), tangent.detach(), *torch.autograd.grad(loss, leaves)]


@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_f_linear_in_value_tangent_and_gradients(bias: bool, dims: int) -> None:
    for ours, native in zip(_all(linear, bias, dims), _all(F.linear, bias, dims), strict=True):
        torch.testing.assert_close(ours, native, rtol=1e-12, atol=1e-12)


def test_a_tangent_on_the_weights_and_dual_tensors_are_handled_too() -> None:
    x, dx, w, b = _tensors(True, 3)
    dw, db = torch.randn_like(w), torch.randn_like(b)
    for inputs, tangents in (((x, w, b), (dx, dw, db)), ((w,), (dw,)), ((b,), (db,))):
        # all three tangents; the weights' alone, x held constant; the bias's alone
        def call(fn: Callable[..., Tensor], *args: Tensor, n: int = len(inputs)) -> Tensor:
            full = {3: lambda: args, 1: lambda: (x, *args, b) if args[0].dim() == 2 else (x, w, *args)}[n]()
            return fn(*full)

        expected = torch.func.jvp(lambda *a: call(F.linear, *a), inputs, tangents)
        got = torch.func.jvp(lambda *a: call(linear, *a), inputs, tangents)
        for a, e in zip(got, expected, strict=True):
            torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12)
    with fwAD.dual_level():
        out = linear(fwAD.make_dual(x, dx), w, b)
        torch.testing.assert_close(fwAD.unpack_dual(out).tangent, F.linear(dx, w))


def test_gradcheck() -> None:
    x, dx, w, b = (t.requires_grad_(True) for t in _tensors(True, 2))

    def both(x: Tensor, dx: Tensor, w: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        out, tangent = torch.func.jvp(lambda a: linear(a, w, b), (x,), (dx,))
        return out, tangent

    assert torch.autograd.gradcheck(both, (x, dx, w, b))


def _jvp_flops(fn: Callable[..., Tensor]) -> float:
    """Matmul FLOPs of one JVP pass through `fn` (nn.Linear-shaped, weights without tangent), in forwards."""
    x, dx, w, b = _tensors(True, 2)
    counter = DtypeFlops()
    with counter:
        torch.func.jvp(lambda a: fn(a, w, b), (x,), (dx,))
    return counter.total() / (2 * x.shape[0] * IN * OUT)


def test_a_jvp_pass_costs_two_matmuls_not_three() -> None:
    assert _jvp_flops(linear) == 2.0  # y and y' = x'Wᵀ
    assert _jvp_flops(F.linear) == 3.0  # torch 2.13: also x·0ᵀ, the weights' zero tangent materialised


@pytest.mark.parametrize("bias", [True, False])
def test_under_autocast_it_computes_what_autocast_computes(bias: bool) -> None:
    x, dx, w, b = (t.float() if t is not None else None for t in _tensors(bias, 3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = torch.func.jvp(lambda a: linear(a, w, b), (x,), (dx,))
        native = F.linear(x, w, b), F.linear(dx, w)  # autocast casts x, W and b to bf16
    for a, e in zip(ours, native, strict=True):
        assert a.dtype == torch.bfloat16
        torch.testing.assert_close(a, e, rtol=0, atol=0)


def test_each_gradient_is_computed_and_kept_for_only_where_it_is_needed() -> None:
    """A frozen weight keeps no activation and costs no matmul for its gradient; an input that needs no
    gradient keeps no weight and costs none either; a frozen bias costs no reduction (the frozen ascent)."""
    x, _, w, b = _tensors(True, 3)
    grad = torch.randn(3, 5, OUT, dtype=torch.float64)
    rows = 3 * 5 * IN * OUT * 2  # one matmul over every row
    for x_grad, w_grad, kept_shape in ((True, False, (OUT, IN)), (False, True, (3, 5, IN))):
        xi, wi, bi = x.clone().requires_grad_(x_grad), w.clone().requires_grad_(w_grad), b.clone()
        kept: list[tuple[int, ...]] = []
        with torch.autograd.graph.saved_tensors_hooks(
            lambda t, kept=kept: kept.append(tuple(t.shape)) or t, lambda t: t
        ):
            out = linear(xi, wi, bi)
        counter, sums = DtypeFlops(), OpCount(torch.ops.aten.sum)
        with counter, sums:
            out.backward(grad)
        assert kept == [kept_shape] and counter.total() == rows
        assert sums.count == 0  # the bias is frozen too: no reduction for its gradient
        expected = grad @ w if x_grad else grad.reshape(-1, OUT).t() @ x.reshape(-1, IN)
        torch.testing.assert_close(xi.grad if x_grad else wi.grad, expected)
        assert (wi.grad if x_grad else xi.grad) is None


def test_a_linear_layer_whose_input_carries_no_tangent_has_a_zero_one() -> None:
    x, _, w, b = _tensors(True, 3)
    ctx = SimpleNamespace(saved_tensors=(x, w), shape=torch.Size((3, 5, OUT)), dtype=torch.float64)
    tangent = _Linear.jvp(ctx, None, None, None)
    assert tangent.shape == (3, 5, OUT) and tangent.dtype == torch.float64 and not tangent.any()
    meta = SimpleNamespace(saved_tensors=(x.to("meta"), w.to("meta")), shape=ctx.shape, dtype=ctx.dtype)
    assert _Linear.jvp(meta, None, None, None).device.type == "meta"  # on the weights' device, not the CPU


def test_light_linear_runs_every_nn_linear_as_ours() -> None:
    layer = torch.nn.Linear(IN, OUT).double()
    x, dx, _, _ = _tensors(True, 2)
    counter = DtypeFlops()
    with counter, LightLinear():
        out, tangent = torch.func.jvp(layer, (x,), (dx,))
    assert counter.total() == 2 * 2 * x.shape[0] * IN * OUT
    torch.testing.assert_close(tangent, F.linear(dx, layer.weight))


def test_within_casts_shared_each_weight_is_cast_once_and_reaches_its_gradient() -> None:
    layer = torch.nn.Linear(IN, OUT)
    x = torch.randn(3, IN)
    casts = _Casts()
    with torch.autocast("cpu", dtype=torch.bfloat16), casts, casts_shared(layer):
        assert casts.count == 2  # the weight and the bias, on entry
        layer.requires_grad_(False)  # a frozen pass first (the ascent)
        frozen = linear(x, layer.weight, layer.bias)
        assert not frozen.requires_grad
        layer.requires_grad_(True)
        trained = linear(x, layer.weight, layer.bias)
        assert casts.count == 4  # x twice: the weight and bias casts are shared
        torch.testing.assert_close(trained, frozen, rtol=0, atol=0)
        trained.sum().backward()
        with torch.no_grad():
            layer.weight.mul_(2.0)  # changed in place: the next use casts again
        doubled = linear(x, layer.weight, layer.bias)
        # the backward cast the two gradients back to fp32; then x and the changed weight, not the bias
        assert casts.count == 4 + 2 + 2 and not torch.equal(doubled, trained)
    assert layer.weight.grad is not None and layer.bias.grad is not None
    torch.testing.assert_close(
        layer.weight.grad, torch.ones(3, OUT).t() @ x.bfloat16().float(), rtol=0.01, atol=0
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):  # outside the scope: a cast per call again
        casts = _Casts()
        with casts:
            linear(x, layer.weight, layer.bias)
        assert casts.count == 3


def test_casts_shared_reaches_only_the_modules_linear_layers_and_nothing_without_autocast() -> None:
    layer, other = torch.nn.Linear(IN, OUT), torch.nn.Linear(IN, OUT)
    x = torch.randn(3, IN)
    casts = _Casts()
    with casts, torch.autocast("cpu", dtype=torch.bfloat16), casts_shared(layer):
        assert casts.count == 2
        linear(x, other.weight, other.bias)
        linear(x, other.weight, other.bias)  # not the module's: cast on every call
        assert casts.count == 8
    with casts, casts_shared(layer):
        linear(x, layer.weight, layer.bias)  # no autocast: fp32, nothing cast on entry or in the call
        assert casts.count == 8
    with casts_shared(None), torch.autocast("cpu", dtype=torch.bfloat16), casts:
        linear(x, layer.weight, layer.bias)  # no module: as outside the scope
    assert casts.count == 11
