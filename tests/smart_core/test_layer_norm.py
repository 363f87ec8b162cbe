"""smart_core.layer_norm: layer norm whose tangent's reverse pass sees the statistics, keeping only x and dx."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import SimpleNamespace

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch import Tensor

from smart_core.layer_norm import _LayerNorm, _LayerNormTangent, layer_norm

from .op_count import OpCount

H = 16


def written_out(
    x: Tensor, shape: Sequence[int], w: Tensor | None, b: Tensor | None, eps: float = 1e-5
) -> Tensor:
    """Layer norm as plain ops: the reference whose every derivative autograd gets right."""
    centred = x - x.mean(dim=-1, keepdim=True)
    out = centred * torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + eps)
    out = out * w if w is not None else out
    return out + b if b is not None else out


def _all(norm: Callable[..., Tensor], affine: bool) -> list[Tensor]:
    """[y, dy, then the gradient of a loss of both with respect to x, dx, w, b]: the weights enter as a model's do,
    outside the JVP's inputs, as the linearised step's final pass sees them."""
    gen = torch.Generator().manual_seed(0)
    x, dx = (torch.randn(3, 5, H, dtype=torch.float64, generator=gen) for _ in range(2))
    leaves = [x.requires_grad_(True), dx.requires_grad_(True)]
    if affine:
        leaves += [torch.randn(H, dtype=torch.float64, generator=gen).requires_grad_(True) for _ in range(2)]
    weights = leaves[2:] if affine else [None, None]
    out, tangent = torch.func.jvp(lambda a: norm(a, (H,), *weights), (leaves[0],), (leaves[1],))
    loss = (tangent**2).sum() + (out * 1.3).sum()
    return [out.detach(), tangent.detach(), *torch.autograd.grad(loss, leaves)]


@pytest.mark.parametrize("affine", [True, False])
def test_matches_the_written_out_norm_in_value_tangent_and_gradients(affine: bool) -> None:
    for a, b in zip(_all(layer_norm, affine), _all(written_out, affine), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_the_fused_norm_gets_the_tangents_reverse_pass_wrong_and_this_one_does_not() -> None:
    fused = _all(F.layer_norm, affine=True)
    ours, reference = _all(layer_norm, affine=True), _all(written_out, affine=True)
    assert not torch.allclose(
        fused[2], reference[2]
    )  # ∂/∂x through the tangent: the statistics held constant
    torch.testing.assert_close(ours[2], reference[2])


def test_gradcheck_through_the_tangent() -> None:
    gen = torch.Generator().manual_seed(1)
    tensors = [torch.randn(*shape, dtype=torch.float64, generator=gen, requires_grad=True)
               for shape in ((2, 3, 6), (2, 3, 6), (6,), (6,))]  # fmt: skip

    def tangent(x: Tensor, dx: Tensor, w: Tensor, b: Tensor) -> Tensor:
        return torch.func.jvp(lambda a: layer_norm(a, (6,), w, b), (x,), (dx,))[1]

    assert torch.autograd.gradcheck(tangent, tensors)


def _saved_token_tensors(norm: Callable[..., Tensor]) -> int:
    """How many (B, T, H) tensors a JVP pass through `norm` keeps for its backward."""
    x, dx = torch.randn(2, 4, H, requires_grad=True), torch.randn(2, 4, H, requires_grad=True)
    w, b = torch.randn(H, requires_grad=True), torch.randn(H, requires_grad=True)
    saved = 0

    def pack(t: Tensor) -> Tensor:
        nonlocal saved
        saved += t.shape == x.shape
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out, tangent = torch.func.jvp(lambda a: norm(a, (H,), w, b), (x,), (dx,))
    ((tangent**2).sum() + out.sum()).backward()
    return saved


def test_keeps_only_its_input_and_tangent() -> None:
    assert _saved_token_tensors(layer_norm) <= 3  # x and dx, x again for the primal's backward
    assert _saved_token_tensors(written_out) > 6


def test_under_autocast_it_computes_in_fp32_as_layer_norm_does() -> None:
    x = torch.randn(2, 3, H).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer_norm(x, (H,), torch.ones(H), torch.zeros(H)).dtype == torch.float32
    assert layer_norm(x, (H,)).dtype == torch.bfloat16


@pytest.mark.parametrize(("weight_trains", "bias_trains"), [(False, True), (True, False), (False, False)])
def test_a_frozen_weight_or_bias_leaves_the_other_gradients_right(
    weight_trains: bool, bias_trains: bool
) -> None:
    """The fused backward is asked for exactly the gradients needed: a frozen weight must not cost x or the bias
    theirs (each flag is read from its own input)."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, H, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.randn(H, dtype=torch.float64, generator=gen).requires_grad_(weight_trains)
    b = torch.randn(H, dtype=torch.float64, generator=gen).requires_grad_(bias_trains)
    leaves = [t for t in (x, w, b) if t.requires_grad]
    grads = torch.autograd.grad((layer_norm(x, (H,), w, b) ** 3).sum(), leaves)
    expected = torch.autograd.grad((written_out(x, (H,), w, b) ** 3).sum(), leaves)
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("along_x", [True, False])
def test_the_tangent_along_the_weight_and_bias_too(along_x: bool) -> None:
    """A JVP in the weight and bias, with or without x, gives the written-out norm's tangent, dy = ... + x̂·dw + db,
    and so do the gradients through that tangent to every input and tangent."""
    gen = torch.Generator().manual_seed(4)
    x, dx = (torch.randn(2, 3, H, dtype=torch.float64, generator=gen, requires_grad=True) for _ in range(2))
    w, dw, b, db = (torch.randn(H, dtype=torch.float64, generator=gen, requires_grad=True) for _ in range(4))
    leaves = [x, w, dx, dw, db] if along_x else [x, w, dw, db]  # the tangent does not depend on b

    def through_tangent(norm: Callable[..., Tensor]) -> list[Tensor]:
        if along_x:
            tangent = torch.func.jvp(lambda *a: norm(a[0], (H,), a[1], a[2]), (x, w, b), (dx, dw, db))[1]
        else:  # x is a constant of the JVP: only the weights carry a tangent
            tangent = torch.func.jvp(lambda *a: norm(x, (H,), a[0], a[1]), (w, b), (dw, db))[1]
        return [tangent, *torch.autograd.grad((tangent**2).sum(), leaves)]

    for got, want in zip(through_tangent(layer_norm), through_tangent(written_out), strict=True):
        torch.testing.assert_close(got, want)


def _Fills() -> OpCount:
    return OpCount(torch.ops.aten.zeros, torch.ops.aten.zeros_like, torch.ops.aten.new_zeros)


@pytest.mark.parametrize("dual", [True, False])
def test_no_zeros_are_made_for_the_weights_missing_tangents_or_the_statistics_gradients(dual: bool) -> None:
    """The linearised step's passes: x carries a tangent, the weights none, and mean and rstd reach no loss.
    Zeros materialised for them cost two launches a call forward and two back (72 a MiniLM-L6 step)."""
    gen = torch.Generator().manual_seed(5)
    x, dx = (torch.randn(3, 5, H, dtype=torch.float64, generator=gen) for _ in range(2))
    w, b = (torch.randn(H, dtype=torch.float64, generator=gen).requires_grad_(True) for _ in range(2))
    x.requires_grad_(True)
    fills = _Fills()
    with fills:
        if dual:
            with fwAD.dual_level():
                out, tangent = fwAD.unpack_dual(layer_norm(fwAD.make_dual(x, dx), (H,), w, b))
        else:
            out, tangent = torch.func.jvp(lambda a: layer_norm(a, (H,), w, b), (x,), (dx,))
        grads = torch.autograd.grad((tangent**2).sum() + out.sum(), (x, w, b))
    assert fills.count == 0
    expected_out, expected_tangent = torch.func.jvp(lambda a: written_out(a, (H,), w, b), (x,), (dx,))
    expected = torch.autograd.grad((expected_tangent**2).sum() + expected_out.sum(), (x, w, b))
    for got, want in zip((out, tangent, *grads), (expected_out, expected_tangent, *expected), strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("weights", [torch.float32, torch.bfloat16])
def test_a_bf16_input_under_autocast_is_normalised_linearised_and_differentiated_in_fp32(
    weights: torch.dtype,
) -> None:
    """A bf16 residual stream (a model kept in bf16): under autocast the value, the tangent and the weights'
    gradients through both are those of the fp64 norm of the same numbers to fp32's precision, not bf16's
    (statistics or a tangent's mean taken at bf16 are off by ~1e-3); x's and dx's gradients come back at bf16,
    each a sum of bf16 roundings."""
    gen = torch.Generator().manual_seed(6)
    x, dx = (torch.randn(3, 5, H, generator=gen).bfloat16().requires_grad_(True) for _ in range(2))
    w, b = (torch.randn(H, generator=gen).to(weights).requires_grad_(True) for _ in range(2))

    def everything(norm: Callable[..., Tensor], leaves: list[Tensor]) -> list[Tensor]:
        out, tangent = torch.func.jvp(
            lambda a: norm(a, (H,), leaves[2], leaves[3]), (leaves[0],), (leaves[1],)
        )
        loss = (tangent**2).sum() + (out * 1.3).sum()
        return [out, tangent, *torch.autograd.grad(loss, leaves)]

    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = everything(layer_norm, [x, dx, w, b])
    reference = everything(written_out, [t.detach().double().requires_grad_(True) for t in (x, dx, w, b)])
    out, tangent, grad_x, grad_dx, grad_w, grad_b = ours
    assert out.dtype == tangent.dtype == torch.float32 and grad_x.dtype == grad_dx.dtype == torch.bfloat16
    exact, rounded = [(out, 0), (tangent, 1)], [(grad_x, 2), (grad_dx, 3)]  # (ours, the reference's index)
    (exact if weights == torch.float32 else rounded).extend([(grad_w, 4), (grad_b, 5)])
    for got, index in exact:
        torch.testing.assert_close(got.double(), reference[index], rtol=2e-5, atol=2e-5)
    for got, index in rounded:  # at bf16: fp32 results rounded (x's: the tangent's and the primal's, summed)
        torch.testing.assert_close(got.double(), reference[index], rtol=2**-6, atol=1e-2)


def test_a_backward_with_no_gradient_for_the_output_returns_none_for_each_input() -> None:
    """Grads are not materialised (set_materialize_grads(False)): a backward whose output reached nothing that
    is differentiated gets None and answers None for its six inputs, not zeros it would have to make; the
    tangent's backward, asked for no input's gradient, answers None for its eight."""
    assert _LayerNorm.backward(object(), None, None, None) == (None,) * 6
    x = torch.randn(2, H)
    frozen = SimpleNamespace(saved_tensors=(x, None, x, None, None), needs_input_grad=(False,) * 8)
    assert (
        _LayerNormTangent.backward(frozen, torch.ones(2, H)) == (None,) * 8
    )  # nothing it was given needs one
