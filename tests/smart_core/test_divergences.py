"""ℓ_s and the task loss against their formulas, written out independently in float64 (reference.py)."""

from __future__ import annotations

import pytest
import torch

from smart_core import divergence, squared_error, symmetric_kl, task_loss
from smart_core.divergences import per_example_squared_error, per_example_symmetric_kl

from . import reference as ref


def _logits(seed: int = 0, batch: int = 5, classes: int = 3, dtype: torch.dtype = torch.float64):
    g = torch.Generator().manual_seed(seed)
    p = torch.randn(batch, classes, generator=g, dtype=torch.float64) * 2
    q = torch.randn(batch, classes, generator=g, dtype=torch.float64) * 2
    return p.to(dtype), q.to(dtype)


def test_symmetric_kl_matches_the_formula() -> None:
    p, q = _logits()
    expected = ref.sym_kl(p, q)
    torch.testing.assert_close(symmetric_kl(p, q), expected, rtol=1e-12, atol=0)
    torch.testing.assert_close(divergence(p, q, regression=False), expected, rtol=1e-12, atol=0)
    # Not one-directional: each KL alone is visibly different from their sum.
    pp, qq = ref.softmax64(p), ref.softmax64(q)
    one_way = (pp * torch.log(pp / qq)).sum(-1).mean()
    assert abs(symmetric_kl(p, q).item() - one_way.item()) > 0.1 * one_way.item()
    # Symmetric in its arguments; zero on identical inputs, positive otherwise.
    torch.testing.assert_close(symmetric_kl(q, p), expected, rtol=1e-12, atol=0)
    assert symmetric_kl(p, p).item() == 0.0


def test_reductions_are_batch_mean_sum_and_none() -> None:
    p, q = _logits(batch=7)
    per = torch.stack([ref.sym_kl(p[i : i + 1], q[i : i + 1]) for i in range(7)])
    torch.testing.assert_close(per_example_symmetric_kl(p, q), per, rtol=1e-12, atol=0)
    torch.testing.assert_close(divergence(p, q, regression=False, reduction="none"), per, rtol=1e-12, atol=0)
    torch.testing.assert_close(
        divergence(p, q, regression=False, reduction="sum"), per.sum(), rtol=1e-12, atol=0
    )
    torch.testing.assert_close(
        divergence(p, q, regression=False, reduction="mean"), per.mean(), rtol=1e-12, atol=0
    )
    torch.testing.assert_close(
        symmetric_kl(p, q), per.sum() / 7, rtol=1e-12, atol=0
    )  # a batch mean, not a sum


def test_squared_error_matches_the_formula() -> None:
    g = torch.Generator().manual_seed(1)
    a = torch.randn(6, generator=g, dtype=torch.float64)
    b = torch.randn(6, generator=g, dtype=torch.float64)
    torch.testing.assert_close(squared_error(a, b), ref.squared(a, b), rtol=1e-12, atol=0)
    torch.testing.assert_close(divergence(a, b, regression=True), ref.squared(a, b), rtol=1e-12, atol=0)
    torch.testing.assert_close(per_example_squared_error(a, b), (a - b) ** 2, rtol=1e-12, atol=0)
    torch.testing.assert_close(divergence(a, b, regression=True, reduction="none"), (a - b) ** 2)
    torch.testing.assert_close(divergence(a, b, regression=True, reduction="sum"), ((a - b) ** 2).sum())


def test_gradient_reaches_both_inputs() -> None:
    p, q = _logits(seed=2)
    p.requires_grad_(True)
    q.requires_grad_(True)
    lib = torch.autograd.grad(symmetric_kl(p, q), [p, q])
    expected = torch.autograd.grad(ref.sym_kl(p, q), [p, q])
    for a, b in zip(lib, expected, strict=True):
        assert b.abs().sum() > 0
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-14)
    a, b = p[:, 0], q[:, 0]
    lib = torch.autograd.grad(squared_error(a, b), [p, q])
    expected = torch.autograd.grad(ref.squared(a, b), [p, q])
    for x, y in zip(lib, expected, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_outputs_are_compared_in_fp32(dtype: torch.dtype) -> None:
    p, q = _logits(seed=3, dtype=dtype)
    value = symmetric_kl(p, q)
    assert value.dtype == torch.float32
    torch.testing.assert_close(value.double(), ref.sym_kl(p.double(), q.double()), rtol=1e-5, atol=0)
    a, b = p[:, 0], (p[:, 0].float() + 1e-3).to(dtype)
    se = squared_error(a, b)
    assert se.dtype == torch.float32
    torch.testing.assert_close(se.double(), ref.squared(a.double(), b.double()), rtol=1e-5, atol=0)
    assert divergence(p[:, 0], p[:, 0], regression=True).item() == 0.0


def test_task_loss_is_cross_entropy_or_squared_error() -> None:
    p, _ = _logits(seed=4, batch=6)
    labels = torch.tensor([0, 1, 2, 2, 1, 0])
    torch.testing.assert_close(task_loss(p, labels, False), ref.cross_entropy(p, labels), rtol=1e-12, atol=0)
    low = task_loss(p.to(torch.bfloat16), labels, False)
    assert low.dtype == torch.float32
    torch.testing.assert_close(
        low.double(), ref.cross_entropy(p.to(torch.bfloat16).double(), labels), rtol=1e-5, atol=0
    )
    targets = torch.linspace(0.0, 5.0, 6, dtype=torch.float64)
    torch.testing.assert_close(
        task_loss(p[:, 0], targets, True), ref.squared(p[:, 0], targets), rtol=1e-12, atol=0
    )


def test_regression_targets_are_not_rounded_to_the_outputs_dtype() -> None:
    """An STS-B score of 3.8 compared with bf16 predictions stays 3.8 (bf16 would make it 3.796875)."""
    predictions = torch.tensor([3.0, 4.0, 1.0], dtype=torch.bfloat16)
    targets = torch.tensor([3.8, 3.8, 0.3])
    value = task_loss(predictions, targets, True)
    assert value.dtype == torch.float32
    expected = ((predictions.double() - targets.double()) ** 2).mean()
    torch.testing.assert_close(value.double(), expected, rtol=1e-6, atol=0)
    rounded = ((predictions.double() - targets.to(torch.bfloat16).double()) ** 2).mean()
    assert abs(value.item() - rounded.item()) > 1e-4
    # Integer scores are promoted too.
    ints = torch.tensor([3, 4, 1])
    assert task_loss(predictions, ints, True).item() == 0.0


def test_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match=r"\(B, C\)"):
        symmetric_kl(torch.zeros(4, 3), torch.zeros(4, 2))
    with pytest.raises(ValueError, match=r"\(B, C\)"):
        symmetric_kl(torch.zeros(4), torch.zeros(4))
    with pytest.raises(ValueError, match=r"\(B,\)"):
        squared_error(torch.zeros(4), torch.zeros(4, 1))  # mt-dnn's silent [B] x [B, 1] broadcast
    with pytest.raises(ValueError, match=r"\(B,\)"):
        squared_error(torch.zeros(4, 1), torch.zeros(4, 1))
    with pytest.raises(ValueError, match="classification"):
        task_loss(torch.zeros(4), torch.zeros(4, dtype=torch.long), False)
    with pytest.raises(ValueError, match="classification"):
        task_loss(torch.zeros(4, 2), torch.zeros(3, dtype=torch.long), False)
