"""Perturbation arithmetic: noise draws, gradient normalisation, projections, sizes."""

from __future__ import annotations

import math

import pytest
import torch

from smart_core.perturbation import (
    gaussian_init,
    initial_noise,
    normalize_gradient,
    project,
    project_max_norm,
    sizes,
    uniform_init,
)

from . import reference as ref

MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])


def _like(dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.zeros(3, 4, 5, dtype=dtype)


def _g(seed: int = 0) -> torch.Tensor:
    return torch.randn(
        3, 4, 5, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    ) * MASK.unsqueeze(-1)


def test_normal_noise_is_n_0_sigma2_on_real_tokens() -> None:
    like = torch.zeros(64, 4, 32, dtype=torch.bfloat16)
    mask = torch.ones(64, 4, dtype=torch.long)
    mask[:, -1] = 0
    nu = initial_noise(like, mask, 0.5, "normal", torch.Generator().manual_seed(1))
    assert nu.dtype == torch.float32 and nu.shape == like.shape
    assert (nu[:, -1] == 0).all()
    real = nu[:, :-1].double()
    assert abs(real.std().item() - 0.5) < 0.02 and abs(real.mean().item()) < 0.02
    assert real.abs().max().item() > 1.0  # unbounded, unlike the uniform draw
    # The same draw as the library's Gaussian init, from the given generator only.
    again = gaussian_init(like, mask, 0.5, torch.Generator().manual_seed(1))
    assert torch.equal(nu, again)
    expected = torch.randn(like.shape, generator=torch.Generator().manual_seed(1)) * 0.5 * mask.unsqueeze(-1)
    assert torch.equal(nu, expected)
    state = torch.get_rng_state()
    initial_noise(like, mask, 0.5, "normal", torch.Generator().manual_seed(1))
    assert torch.equal(state, torch.get_rng_state())  # the global stream is not consumed


def test_uniform_noise_is_u_minus_sigma_sigma() -> None:
    like = torch.zeros(64, 4, 32)
    mask = torch.ones(64, 4, dtype=torch.long)
    mask[:, 0] = 0
    nu = initial_noise(like, mask, 0.5, "uniform", torch.Generator().manual_seed(2))
    assert nu.dtype == torch.float32
    assert (nu[:, 0] == 0).all()
    real = nu[:, 1:].double()
    assert real.abs().max().item() <= 0.5
    assert real.max().item() > 0.49 and real.min().item() < -0.49  # fills the interval
    assert abs(real.abs().mean().item() - 0.25) < 0.01  # E|U(−σ, σ)| = σ/2
    assert abs(real.std().item() - 0.5 / math.sqrt(3)) < 0.01
    expected = (torch.rand(like.shape, generator=torch.Generator().manual_seed(2)) * 2 - 1) * 0.5
    assert torch.equal(nu, expected * mask.unsqueeze(-1))


def test_uniform_init_scales_like_freelb() -> None:
    like = _like(torch.float32)
    draw = (torch.rand(like.shape, generator=torch.Generator().manual_seed(3)) * 2 - 1) * MASK.unsqueeze(-1)
    linf = uniform_init(like, MASK, 0.7, "inf", torch.Generator().manual_seed(3))
    torch.testing.assert_close(linf, draw * 0.7)
    l2 = uniform_init(like, MASK, 0.7, "l2", torch.Generator().manual_seed(3))
    lengths = MASK.sum(1).double()
    torch.testing.assert_close(l2.double(), draw.double() * (0.7 / torch.sqrt(lengths * 5)).view(-1, 1, 1))
    assert l2.dtype == torch.float32
    # A one-token example: magnitude / √H (the length is not clamped above 1).
    one = uniform_init(
        torch.zeros(1, 4, 5), torch.tensor([[1, 0, 0, 0]]), 0.7, "l2", torch.Generator().manual_seed(4)
    )
    u = torch.rand(1, 4, 5, generator=torch.Generator().manual_seed(4)) * 2 - 1
    torch.testing.assert_close(one[0, 0], u[0, 0] * 0.7 / 5**0.5)
    # An all-padding row gets no perturbation and no division by zero.
    empty = uniform_init(_like(), torch.zeros(3, 4), 0.7, "l2")
    assert torch.equal(empty, torch.zeros_like(empty))


@pytest.mark.parametrize("mode", ["example-inf", "token-inf", "example-l2", "none"])
def test_normalize_gradient(mode: str) -> None:
    g = _g()
    out = normalize_gradient(g, mode)  # type: ignore[arg-type]
    if mode == "none":
        assert torch.equal(out, g)
        return
    if mode == "token-inf":
        norm = g.abs().max(dim=-1, keepdim=True).values
        expected = torch.where(norm > 0, g / norm, torch.zeros_like(g))
    else:
        expected = g / ref.example_norm(g, "inf" if mode == "example-inf" else "2")
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=0)
    zero = normalize_gradient(torch.zeros(2, 3, 4), mode)  # type: ignore[arg-type]
    assert torch.equal(zero, torch.zeros(2, 3, 4))  # 0, not 0/0
    with pytest.raises(ValueError, match="normalisation"):
        normalize_gradient(g, "example-l1")  # type: ignore[arg-type]


def test_ball_projection() -> None:
    g = _g(1)
    clamped = project(g, MASK, "ball", "inf", 0.3, 0.0)
    torch.testing.assert_close(clamped, ref.project_example_ball(g, "inf", 0.3), rtol=0, atol=0)
    projected = project(g, MASK, "ball", "2", 1.0, 0.0)
    torch.testing.assert_close(projected, ref.project_example_ball(g, "2", 1.0), rtol=1e-12, atol=0)
    norms = ref.example_norm(g, "2").flatten()
    assert (norms > 1.0).any()
    # Inside the ball nothing moves (a projection, not a rescale onto the sphere).
    small = g * 0.01
    assert torch.equal(project(small, MASK, "ball", "2", 1.0, 0.0), small)
    assert torch.equal(project(small, MASK, "ball", "inf", 1.0, 0.0), small)
    # Padding is zeroed whatever came in.
    full = torch.ones(3, 4, 5)
    for p in ("inf", "2"):
        out = project(full, MASK, "ball", p, 10.0, 0.0)  # type: ignore[arg-type]
        assert torch.equal(out, MASK.unsqueeze(-1).expand(3, 4, 5).float())


def test_renorm_projection() -> None:
    g = _g(2)
    out = project(g, MASK, "renorm", "inf", 123.0, 1e-6)
    expected = g / (g.abs().max(dim=-1, keepdim=True).values + 1e-6)
    torch.testing.assert_close(out, expected * MASK.unsqueeze(-1), rtol=1e-12, atol=0)
    out2 = project(g, MASK, "renorm", "2", 123.0, 0.5)
    expected2 = g / (torch.sqrt((g**2).sum(-1, keepdim=True)) + 0.5)
    torch.testing.assert_close(out2, expected2 * MASK.unsqueeze(-1), rtol=1e-12, atol=0)
    assert torch.isfinite(project(torch.zeros(3, 4, 5), MASK, "renorm", "2", 1.0, 0.0)).all()
    with pytest.raises(ValueError, match="projection"):
        project(g, MASK, "clip", "inf", 1.0, 0.0)  # type: ignore[arg-type]


def test_project_max_norm() -> None:
    g = _g(3) * 3
    unmasked = g + 1.0
    assert torch.equal(project_max_norm(unmasked, MASK, "l2", 0.0), unmasked * MASK.unsqueeze(-1))
    torch.testing.assert_close(project_max_norm(g, MASK, "l2", 0.5), ref.project_example_ball(g, "2", 0.5))
    torch.testing.assert_close(project_max_norm(g, MASK, "inf", 0.5), g.clamp(-0.5, 0.5))
    assert (ref.example_norm(g, "2") > 0.5).all() and (g.abs() > 0.5).any()


def test_sizes() -> None:
    g = _g(4)
    linf, l2 = sizes(g)
    assert linf.item() == g.abs().max().item()
    torch.testing.assert_close(l2, ref.example_norm(g, "2").mean(), rtol=1e-12, atol=0)
    g.requires_grad_(True)
    assert not any(t.requires_grad for t in sizes(g * 2))
