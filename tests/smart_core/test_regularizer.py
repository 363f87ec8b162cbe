"""R_s against Algorithm 1: an independent reference loop, a hand-computed linear case, and the invariants."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from smart_core import MethodConfig, ascend, divergence, smoothness_regularizer
from smart_core.adversarial import (
    ascent_signal,
    exact_ascent_gradient,
    input_gradient_only,
    weights_frozen,
)

from . import reference as ref
from .toy import ToyEncoder, toy_batch


def reference_r_s(
    model: ToyEncoder, ids: Tensor, mask: Tensor, cfg: MethodConfig, noise: Tensor, regression: bool = False
) -> tuple[Tensor, Tensor, Tensor]:
    """Algorithm 1, lines 5-10, one example at a time, written from the paper in float64 with the formulas of
    reference.py. Returns (R_s = mean over examples, δ (B, T, H), ‖η·ĝ‖/‖ν‖ of the first step)."""
    x = model.embed(ids)
    values, deltas, steps = [], [], []
    for i in range(ids.shape[0]):
        xi, mi = x[i : i + 1], mask[i : i + 1]
        clean_i = model.from_embeddings(xi, mi)
        delta = noise[i : i + 1].clone()  # x̃ ← x + ν
        for t in range(cfg.ascent_steps):
            delta.requires_grad_(True)
            d = ref.divergence(model.from_embeddings(xi.detach() + delta, mi), clean_i.detach(), regression)
            (g,) = torch.autograd.grad(d, delta)  # g ← ∇_x̃ ℓ_s(f(x̃), f(x))
            if cfg.grad_norm == "example-inf":
                g = g / g.abs().max()  # g̃ ← g / ‖g‖∞
            elif cfg.grad_norm == "example-l2":
                g = g / torch.sqrt((g**2).sum())
            elif cfg.grad_norm == "token-inf":
                g = g / g.abs().amax(dim=-1, keepdim=True).clamp_min(1e-300)
            if t == 0:
                steps.append(g * cfg.eta)
            delta = delta.detach() + cfg.eta * g  # x̃ ← x̃ + η g̃
            if cfg.projection == "ball":  # x̃ ← Π_{‖x̃ − x‖_p ≤ ε}(x̃)
                delta = ref.project_example_ball(delta, cfg.norm_p, cfg.epsilon)
            elif cfg.norm_p == "inf":
                delta = delta / (delta.abs().amax(dim=-1, keepdim=True) + cfg.renorm_stabilizer)
            else:
                delta = delta / (torch.sqrt((delta**2).sum(-1, keepdim=True)) + cfg.renorm_stabilizer)
            delta = delta * mi.unsqueeze(-1).to(delta.dtype)
        deltas.append(delta.detach())
        values.append(ref.divergence(model.from_embeddings(xi + delta.detach(), mi), clean_i, regression))
    step = torch.cat(steps).norm() / noise.norm() if steps else torch.zeros((), dtype=torch.float64)
    return torch.stack(values).mean(), torch.cat(deltas), step


def _noise(shape: torch.Size, mask: Tensor, sigma: float, seed: int) -> Tensor:
    """ν ~ N(0, σ²) drawn as the library draws it (fp32, one randn of the batch's shape), zero on padding."""
    noise = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float32)
    return (noise * sigma * mask.unsqueeze(-1)).double()


CONFIGS = {
    "paper-1-step": MethodConfig(ascent_steps=1, epsilon=1e-3, sigma=1e-4, eta=1e-3),
    "paper-2-steps": MethodConfig(ascent_steps=2, epsilon=1e-3, sigma=1e-4, eta=1e-3),
    "paper-unsaturated": MethodConfig(ascent_steps=2, epsilon=1e-2, sigma=1e-3, eta=1e-3),
    "l2-ball": MethodConfig(
        ascent_steps=2, epsilon=1e-3, sigma=1e-4, eta=1e-3, norm_p="2", grad_norm="example-l2"
    ),
    "renorm-inf": MethodConfig(ascent_steps=2, projection="renorm", grad_norm="none", renorm_stabilizer=1e-3),
    "renorm-2": MethodConfig(ascent_steps=1, projection="renorm", grad_norm="token-inf", norm_p="2"),
}


@pytest.mark.parametrize("regression", [False, True], ids=["classification", "regression"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_matches_per_example_reference_loop(name: str, regression: bool) -> None:
    cfg = CONFIGS[name]
    torch.manual_seed(0)
    model = ToyEncoder(outputs=1 if regression else 2).double()
    ids, mask, _ = toy_batch()
    x = model.embed(ids)
    clean = model.from_embeddings(x, mask)
    gen = torch.Generator().manual_seed(7)
    forward = lambda e: model.from_embeddings(e, mask)  # noqa: E731
    result = smoothness_regularizer(x, clean, forward, mask, cfg, regression, gen)
    expected, delta, step = reference_r_s(
        model, ids, mask, cfg, _noise(x.shape, mask, cfg.sigma, 7), regression
    )
    assert result.r_s.item() > 0 and result.skipped.item() == 0.0
    torch.testing.assert_close(result.r_s.double(), expected, rtol=1e-5, atol=0)
    # The diagnostics: the applied δ's sizes and the first step's size relative to the noise.
    torch.testing.assert_close(result.delta_linf.double(), delta.abs().max(), rtol=1e-5, atol=0)
    torch.testing.assert_close(
        result.delta_l2.double(), ref.example_norm(delta, "2").mean(), rtol=1e-5, atol=0
    )
    torch.testing.assert_close(result.step_to_noise.double(), step, rtol=1e-5, atol=0)
    # Same gradients w.r.t. every parameter.
    lib = ref.grads(result.r_s, list(model.parameters()))
    expect = ref.grads(expected, list(model.parameters()))
    for a, b in zip(lib, expect, strict=True):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-12)
    # ascend alone gives the same δ.
    delta_lib, _, finite = ascend(x, clean, forward, mask, cfg, regression, torch.Generator().manual_seed(7))
    assert finite.dtype == torch.bool and finite.shape == () and bool(finite)
    assert delta_lib.dtype == torch.float32 and not delta_lib.requires_grad
    torch.testing.assert_close(delta_lib.double(), delta, rtol=1e-5, atol=1e-9)


def test_no_ascent_step_is_the_noise_itself() -> None:
    torch.manual_seed(0)
    model = ToyEncoder().double()
    ids, mask, _ = toy_batch()
    x = model.embed(ids)
    clean = model.from_embeddings(x, mask)
    cfg = MethodConfig(ascent_steps=0, sigma=1e-2)
    forward = lambda e: model.from_embeddings(e, mask)  # noqa: E731
    delta, step, finite = ascend(x, clean, forward, mask, cfg, False, torch.Generator().manual_seed(3))
    assert torch.equal(delta.double(), _noise(x.shape, mask, 1e-2, 3)) and bool(finite)
    assert step.item() == 0.0
    result = smoothness_regularizer(x, clean, forward, mask, cfg, False, torch.Generator().manual_seed(3))
    expected = ref.sym_kl(forward(x + _noise(x.shape, mask, 1e-2, 3)), clean)
    torch.testing.assert_close(result.r_s.double(), expected, rtol=1e-6, atol=0)


def test_r_s_gradient_flows_through_both_branches() -> None:
    """∇_θ R_s is the gradient with f(x + δ) and f(x) both attached, not the one-sided gradient with the
    clean branch detached (which, near δ = 0, is a different and much larger vector)."""
    torch.manual_seed(0)
    model = ToyEncoder().double()
    ids, mask, _ = toy_batch()
    params = list(model.parameters())
    forward = lambda e: model.from_embeddings(e, mask)  # noqa: E731
    cfg = MethodConfig(epsilon=1e-2, sigma=1e-3)
    x = model.embed(ids)
    result = smoothness_regularizer(
        x, forward(x), forward, mask, cfg, False, torch.Generator().manual_seed(4)
    )
    delta, _, _ = ascend(x, forward(x), forward, mask, cfg, False, torch.Generator().manual_seed(4))
    x = model.embed(ids)
    both = ref.sym_kl(forward(x + delta.double()), forward(x))
    one_sided = ref.sym_kl(forward(x + delta.double()), forward(x).detach())
    torch.testing.assert_close(result.r_s.double(), both, rtol=1e-7, atol=0)
    lib, g_both, g_one = ref.grads(result.r_s, params), ref.grads(both, params), ref.grads(one_sided, params)

    def flat(gs: list[Tensor]) -> Tensor:
        return torch.cat([g.flatten() for g in gs])

    torch.testing.assert_close(flat(lib), flat(g_both), rtol=1e-6, atol=1e-14)
    assert (flat(lib) - flat(g_one)).norm() > 0.5 * flat(g_one).norm()
    assert model.embedding.weight in params and g_both[0].abs().sum() > 0  # reaches the embedding too


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
    assert result.delta_l2.item() == pytest.approx(1e-5 * 2, rel=1e-6)


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
        delta, _, finite = ascend(x, clean, lambda e: model.from_embeddings(e, mask), mask, cfg, False)
        assert bool(finite) and delta.dtype == torch.float32
        if p == "inf":
            assert delta.abs().max().item() <= 1e-5 * (1 + 1e-6)
        else:
            assert delta.pow(2).sum(dim=(1, 2)).sqrt().max().item() <= 1e-5 * (1 + 1e-5)


@pytest.mark.parametrize("grad_norm", ["none", "example-inf", "token-inf", "example-l2"])
def test_renorm_gives_unit_per_token_linf(grad_norm: str) -> None:
    model, _, mask, x, clean = _setup()
    cfg = MethodConfig(projection="renorm", grad_norm=grad_norm, renorm_stabilizer=0.0)  # type: ignore[arg-type]
    delta, _, _ = ascend(x, clean, lambda e: model.from_embeddings(e, mask), mask, cfg, False)
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
        delta, _, _ = ascend(x, clean, lambda e: model.from_embeddings(e, mask), mask, cfg, False)
        assert (delta[~mask.bool()] == 0).all()
        assert (delta[mask.bool()] != 0).any()


def test_ascent_step_increases_the_divergence() -> None:
    model, _, mask, x, clean = _setup(torch.float64)
    forward = lambda e: model.from_embeddings(e, mask)  # noqa: E731
    cfg = MethodConfig(epsilon=1e-3, sigma=1e-4, eta=1e-3)
    gen_state = torch.Generator().manual_seed(5)
    start, _, _ = ascend(x, clean, forward, mask, MethodConfig(ascent_steps=0, sigma=1e-4), False, gen_state)
    stepped, _, _ = ascend(x, clean, forward, mask, cfg, False, torch.Generator().manual_seed(5))
    before = ref.sym_kl(forward(x + start.double()), clean)
    after = ref.sym_kl(forward(x + stepped.double()), clean)
    assert after.item() > 2 * before.item() > 0


def test_input_gradient_pass_leaves_parameter_grads_untouched() -> None:
    model, _, mask, x, clean = _setup()
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.5)
    ascend(x, clean, lambda e: model.from_embeddings(e, mask), mask, MethodConfig(ascent_steps=2), False)
    assert all(torch.equal(p.grad, torch.full_like(p, 0.5)) for p in model.parameters())


def test_weights_frozen_freezes_the_trainable_weights_and_restores_them_even_on_error() -> None:
    model = ToyEncoder()
    fixed = next(iter(model.parameters()))
    fixed.requires_grad_(False)  # a weight frozen by the user (LoRA's base weights) stays frozen
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert trainable
    with pytest.raises(RuntimeError, match="inside"), weights_frozen(model):
        assert not any(p.requires_grad for p in model.parameters())
        raise RuntimeError("inside")
    assert all(p.requires_grad for p in trainable) and not fixed.requires_grad
    with weights_frozen(None):  # no module: nothing to freeze
        pass


def test_a_frozen_ascent_gradient_is_the_same_with_a_smaller_graph() -> None:
    model, _, mask, x, clean = _setup(torch.float64)
    forward = lambda e: model.from_embeddings(e, mask)  # noqa: E731
    delta = _noise(x.shape, mask, 1e-3, seed=3)
    saved: dict[bool, int] = {}
    grads: dict[bool, Tensor] = {}
    for frozen in (False, True):
        gradient = input_gradient_only(exact_ascent_gradient, model) if frozen else exact_ascent_gradient
        count = [0]

        def pack(t: Tensor, count: list[int] = count) -> Tensor:
            count[0] += 0 if isinstance(t, nn.Parameter) else t.numel()  # a weight costs nothing more
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            got = gradient(x.detach(), delta, clean.detach(), forward, False)
        saved[frozen], grads[frozen] = count[0], got
    torch.testing.assert_close(grads[True], grads[False], rtol=0, atol=0)
    assert all(p.requires_grad for p in model.parameters())
    assert saved[True] < saved[False], saved  # the weights' gradients would have kept their inputs


def test_the_exact_ascent_gradient_refuses_a_missing_reference() -> None:
    """Only the linearised gradient computes its own f(x); the exact one says what it lacks."""
    model, _, mask, x, _ = _setup(torch.float64)
    with pytest.raises(ValueError, match=r"needs the reference outputs f\(x\)"):
        exact_ascent_gradient(x, torch.zeros_like(x), None, lambda e: model.from_embeddings(e, mask), False)


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
    assert result.skipped.dtype == torch.float32 and result.skipped.item() == 1.0
    assert result.r_s.item() == 0.0 and result.delta_linf.item() == 0.0
    assert result.step_to_noise.item() == 0.0
    fine = smoothness_regularizer(
        x, clean, lambda e: model.from_embeddings(e, mask), mask, MethodConfig(), False
    )
    assert fine.skipped.item() == 0.0 and fine.r_s.item() > 0


def test_a_non_finite_step_is_remembered_over_later_finite_ones() -> None:
    """NaN in the first of two ascent steps only: δ is still zeroed and `finite` is False."""
    model, _, mask, x, clean = _setup()
    calls = []

    def forward(e: Tensor) -> Tensor:
        calls.append(1)
        return model.from_embeddings(_NanGrad.apply(e) if len(calls) == 1 else e, mask)

    cfg = MethodConfig(ascent_steps=2, epsilon=1e-2)
    delta, step, finite = ascend(x, clean, forward, mask, cfg, False)
    assert not bool(finite) and torch.equal(delta, torch.zeros_like(delta)) and step.item() == 0.0
    calls.clear()
    result = smoothness_regularizer(x, clean, forward, mask, cfg, False)
    assert result.skipped.item() == 1.0 and result.r_s.item() == 0.0


def test_ascent_signal_is_the_cosine_of_mirrored_gradients() -> None:
    model, _, mask, x, clean = _setup(torch.float64)
    forward = lambda e: model.from_embeddings(e, mask)  # noqa: E731
    cfg = MethodConfig(sigma=0.3)
    value = ascent_signal(x, clean, forward, mask, cfg, False, torch.Generator().manual_seed(9))
    nu = _noise(x.shape, mask, 0.3, 9)

    def g(d: Tensor) -> Tensor:
        d = d.clone().requires_grad_(True)
        (out,) = torch.autograd.grad(ref.sym_kl(forward(x.detach() + d), clean.detach()) * x.shape[0], d)
        return out.flatten()

    plus, minus = g(nu), g(-nu)
    expected = -(plus @ minus) / (plus.norm() * minus.norm())
    assert 0.0 < expected.item() < 0.99  # at σ = 0.3 the divergence is visibly not quadratic
    assert value.dtype == torch.float32
    torch.testing.assert_close(value.double(), expected, rtol=1e-6, atol=0)
    # Small σ: the gradient is odd in ν, cosine ≈ 1. A second random draw in the forward: no signal.
    small = ascent_signal(
        x, clean, forward, mask, MethodConfig(sigma=1e-4), False, torch.Generator().manual_seed(9)
    )
    assert small.item() > 0.999
    noisy = lambda e: forward(e + torch.randn_like(e) * 1e-2)  # noqa: E731
    lost = ascent_signal(
        x, clean, noisy, mask, MethodConfig(sigma=1e-4), False, torch.Generator().manual_seed(9)
    )
    assert abs(lost.item()) < 0.5


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
    with pytest.raises(ValueError, match=r"\(B,\)"):
        smoothness_regularizer(
            x,
            clean.unsqueeze(-1),
            lambda e: model.from_embeddings(e, mask).unsqueeze(-1),
            mask,
            MethodConfig(),
            True,
        )


def test_perturbation_stays_fp32_under_low_precision_embeddings() -> None:
    model, _, mask, x, clean = _setup()
    xb = x.detach().to(torch.bfloat16)
    forward = lambda e: model.from_embeddings(e.float(), mask)  # noqa: E731
    delta, _, finite = ascend(xb, clean, forward, mask, MethodConfig(), False)
    assert delta.dtype == torch.float32 and bool(finite)
    assert nn.functional.mse_loss((xb + delta).float(), xb.float()).item() > 0  # the 1e-5 step survives
