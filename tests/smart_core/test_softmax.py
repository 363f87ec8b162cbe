"""smart_core.softmax: torch's softmax value, a tangent that a reverse pass can differentiate (dual tensors)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import forward_ad

from smart_core.softmax import log_softmax, softmax


def _through_tangent(fn, x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:  # type: ignore[no-untyped-def]
    """The tangent of fn at x along t (dual tensors), and the gradient of a loss on primal and tangent."""
    with forward_ad.dual_level():
        out = forward_ad.unpack_dual(fn(forward_ad.make_dual(x, t)))
    loss = out.tangent.pow(2).sum() + out.primal.pow(2).sum()
    return out.tangent, torch.autograd.grad(loss, (x, t))


@pytest.mark.parametrize(("ours", "theirs"), [(softmax, F.softmax), (log_softmax, F.log_softmax)])
def test_torchs_fails_where_this_one_works(ours, theirs) -> None:  # type: ignore[no-untyped-def]
    """The reason for the module: torch's forward-mode softmax and log-softmax break a reverse pass through their
    tangent. When a torch release fixes them, this test fails and the substitution can go."""
    x = torch.randn(3, 5, requires_grad=True)
    t = torch.randn(3, 5, requires_grad=True)
    with pytest.raises(RuntimeError, match="inplace operation"):
        _through_tangent(lambda d: theirs(d, -1), x, t)
    _through_tangent(lambda d: ours(d, -1), x, t)


@pytest.mark.parametrize("dim", [-1, 0, 1])
@pytest.mark.parametrize(("ours", "theirs"), [(softmax, F.softmax), (log_softmax, F.log_softmax)])
def test_value_tangent_and_gradients_match_the_reference_in_fp64(ours, theirs, dim: int) -> None:  # type: ignore[no-untyped-def]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    t = torch.randn(4, 6, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    tangent, grads = _through_tangent(lambda d: ours(d, dim), x, t)
    expected = torch.func.jvp(lambda a: theirs(a, dim), (x,), (t,))[1]  # functorch's formula works
    loss = expected.pow(2).sum() + theirs(x, dim).pow(2).sum()
    torch.testing.assert_close(tangent, expected)
    for got, want in zip(grads, torch.autograd.grad(loss, (x, t)), strict=True):
        torch.testing.assert_close(got, want)
    assert torch.equal(ours(x, dim), theirs(x, dim))


@pytest.mark.parametrize("ours", [softmax, log_softmax])
def test_gradcheck_forward_reverse_and_second_order(ours) -> None:  # type: ignore[no-untyped-def]
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a: ours(a, -1), (x,), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(lambda a: ours(a, -1), (x,))


def test_under_autocast_it_returns_what_torch_returns() -> None:
    x = torch.randn(2, 7, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        pairs = [(softmax(x, -1), F.softmax(x, -1)), (log_softmax(x, -1), F.log_softmax(x, -1))]
    assert all(ours.dtype == theirs.dtype and torch.equal(ours, theirs) for ours, theirs in pairs)
    assert softmax(x, -1, dtype=torch.float32).dtype == torch.float32
    assert log_softmax(x, -1, dtype=torch.float32).dtype == torch.float32


def test_without_a_dim_it_refuses() -> None:
    for ours in (softmax, log_softmax):
        with pytest.raises(ValueError, match="explicit dim"):
            ours(torch.randn(3))
