"""R_s against Algorithm 1: reference loop, a hand-computed linear case, and the invariants."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from smart_core import MethodConfig, ascend, smoothness_regularizer
from smart_core.divergences import divergence

from .toy import ToyEncoder, toy_batch


def reference_r_s(model: ToyEncoder, ids: Tensor, mask: Tensor, cfg: MethodConfig, noise: Tensor) -> Tensor:
    """Algorithm 1, one example at a time, written from the paper (p = ∞, ball projection)."""
    x = model.embed(ids)
    values = []
    for i in range(ids.shape[0]):
        xi, mi = x[i : i + 1], mask[i : i + 1]
        clean_i = model.from_embeddings(xi, mi)
        delta = noise[i : i + 1].clone()  # x̃ ← x + ν
        for _ in range(cfg.ascent_steps):
            delta.requires_grad_(True)
            d = divergence(model.from_embeddings(xi.detach() + delta, mi), clean_i.detach(), regression=False)
            (g,) = torch.autograd.grad(d, delta)
            g = g / g.abs().max()  # g ← g / ‖g‖∞
            delta = (delta.detach() + cfg.eta * g).clamp(-cfg.epsilon, cfg.epsilon)  # project to the ε-ball
            delta = delta * mi.unsqueeze(-1)
        values.append(divergence(model.from_embeddings(xi + delta, mi), clean_i, regression=False))
    return torch.stack(values).mean()


@pytest.mark.parametrize("steps", [1, 2])
def test_matches_per_example_reference_loop(steps: int) -> None:
    torch.manual_seed(0)
    model = ToyEncoder().double()
    ids, mask, _ = toy_batch()
    cfg = MethodConfig(ascent_steps=steps, epsilon=1e-3, sigma=1e-4, eta=1e-3)
    x = model.embed(ids)
    clean = model.from_embeddings(x, mask)
    gen = torch.Generator().manual_seed(7)
    result = smoothness_regularizer(x, clean, lambda e: model.from_embeddings(e, mask), mask, cfg, False, gen)
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float32)
    noise = noise * cfg.sigma * mask.unsqueeze(-1)
    expected = reference_r_s(model, ids, mask, cfg, noise.double())
    assert result.r_s.item() > 0
    torch.testing.assert_close(result.r_s.double(), expected, rtol=1e-5, atol=0)
    # Same gradients w.r.t. every parameter.
    lib = torch.autograd.grad(result.r_s, list(model.parameters()))
    ref = torch.autograd.grad(expected, list(model.parameters()))
    for a, b in zip(lib, ref, strict=True):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-12)


def test_linear_model_hand_computed() -> None:
    """f(e) = Σ_t Σ_h w_h e_{t,h}: the step saturates the clamp, so δ = ε·sign(s·w) and R_s = (ε·T·‖w‖₁)²."""
    w = torch.tensor([1.0, -2.0], dtype=torch.float64)
    forward = lambda e: (e.double() * w).sum(dim=(1, 2))  # noqa: E731  (B,)
    x = torch.zeros(1, 2, 2, dtype=torch.float64)
    mask = torch.ones(1, 2, dtype=torch.long)
    cfg = MethodConfig(epsilon=1e-5, sigma=1e-5, eta=1e-3)
    result = smoothness_regularizer(x, forward(x), forward, mask, cfg, True, torch.Generator().manual_seed(3))
    assert result.r_s.item() == pytest.approx((1e-5 * 2 * 3.0) ** 2, rel=1e-6)
    assert result.delta_linf.item() == pytest.approx(1e-5)


def _setup(dtype: torch.dtype = torch.float32) -> tuple[ToyEncoder, Tensor, Tensor, Tensor, Tensor]:
    torch.manual_seed(0)
    model = ToyEncoder().to(dtype)
    ids, mask, _ = toy_batch()
    x = model.embed(ids)
    return model, ids, mask, x, model.from_embeddings(x, mask)


def test_ball_projection_bounds_the_perturbation() -> None:
    model, _, mask, x, clean = _setup()
    for p in ("inf", "2"):
        cfg = MethodConfig(epsilon=1e-5, projection="ball", norm_p=p)
        delta, _ = ascend(x, clean, lambda e: model.from_embeddings(e, mask), mask, cfg, False)
        assert delta is not None and delta.dtype == torch.float32
        if p == "inf":
            assert delta.abs().max().item() <= 1e-5 * (1 + 1e-6)
        else:
            assert delta.pow(2).sum(dim=(1, 2)).sqrt().max().item() <= 1e-5 * (1 + 1e-5)


@pytest.mark.parametrize("grad_norm", ["none", "example-inf", "token-inf", "example-l2"])
def test_renorm_gives_unit_per_token_linf(grad_norm: str) -> None:
    model, _, mask, x, clean = _setup()
    cfg = MethodConfig(projection="renorm", grad_norm=grad_norm, renorm_stabilizer=0.0)  # type: ignore[arg-type]
    delta, _ = ascend(x, clean, lambda e: model.from_embeddings(e, mask), mask, cfg, False)
    per_token = delta.abs().amax(dim=-1)  # (B, T)
    torch.testing.assert_close(per_token[mask.bool()], torch.ones(int(mask.sum())))
    assert per_token[~mask.bool()].abs().max().item() == 0.0


def test_padding_is_never_perturbed() -> None:
    model, _, mask, x, clean = _setup()
    for cfg in (
        MethodConfig(),
        MethodConfig(ascent_steps=3, projection="renorm"),
        MethodConfig(ascent_steps=0),
    ):
        delta, _ = ascend(x, clean, lambda e: model.from_embeddings(e, mask), mask, cfg, False)
        assert (delta[~mask.bool()] == 0).all()
        assert (delta[mask.bool()] != 0).any()


def test_ascent_step_increases_the_divergence() -> None:
    model, _, mask, x, clean = _setup(torch.float64)
    forward = lambda e: model.from_embeddings(e, mask)  # noqa: E731
    cfg = MethodConfig(epsilon=1e-3, sigma=1e-4, eta=1e-3)
    gen_state = torch.Generator().manual_seed(5)
    start, _ = ascend(x, clean, forward, mask, MethodConfig(ascent_steps=0, sigma=1e-4), False, gen_state)
    stepped, _ = ascend(x, clean, forward, mask, cfg, False, torch.Generator().manual_seed(5))
    before = divergence(forward(x + start.double()), clean, regression=False)
    after = divergence(forward(x + stepped.double()), clean, regression=False)
    assert after.item() > 2 * before.item() > 0


def test_input_gradient_pass_leaves_parameter_grads_untouched() -> None:
    model, _, mask, x, clean = _setup()
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.5)
    ascend(x, clean, lambda e: model.from_embeddings(e, mask), mask, MethodConfig(ascent_steps=2), False)
    assert all(torch.equal(p.grad, torch.full_like(p, 0.5)) for p in model.parameters())


class _NanGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: object, x: Tensor) -> Tensor:  # noqa: ARG004
        return x.clone()

    @staticmethod
    def backward(ctx: object, grad: Tensor) -> Tensor:  # noqa: ARG004
        return grad * float("nan")


def test_non_finite_gradient_is_skipped_not_a_crash() -> None:
    model, _, mask, x, clean = _setup()
    forward = lambda e: model.from_embeddings(_NanGrad.apply(e), mask)  # noqa: E731
    result = smoothness_regularizer(x, clean, forward, mask, MethodConfig(), False)
    assert result.skipped and result.r_s.item() == 0.0


def test_outer_term_reaches_clean_and_perturbed_forwards() -> None:
    """Gradient flows through f(x) and f(x + δ): the embedding layer gets gradient from R_s."""
    model, _, mask, x, clean = _setup()
    result = smoothness_regularizer(
        x, clean, lambda e: model.from_embeddings(e, mask), mask, MethodConfig(epsilon=1e-2), False
    )
    result.r_s.backward()
    assert model.embedding.weight.grad is not None and model.embedding.weight.grad.abs().sum() > 0
    assert model.head.weight.grad is not None and model.head.weight.grad.abs().sum() > 0


def test_regression_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match=r"\(B,\)"):
        divergence(torch.zeros(4), torch.zeros(4, 1), regression=True)
    model = ToyEncoder(outputs=1)
    ids, mask, _ = toy_batch()
    x = model.embed(ids)
    clean = model.from_embeddings(x, mask)
    assert clean.shape == (8,)
    result = smoothness_regularizer(
        x, clean, lambda e: model.from_embeddings(e, mask), mask, MethodConfig(epsilon=1e-2), True
    )
    assert result.r_s.shape == () and result.r_s.item() > 0


def test_perturbation_stays_fp32_under_low_precision_embeddings() -> None:
    model, _, mask, x, clean = _setup()
    xb = x.detach().to(torch.bfloat16)
    forward = lambda e: model.from_embeddings(e.float(), mask)  # noqa: E731
    delta, _ = ascend(xb, clean, forward, mask, MethodConfig(), False)
    assert delta.dtype == torch.float32
    assert nn.functional.mse_loss((xb + delta).float(), xb.float()).item() > 0  # the 1e-5 step survives
