"""The combined objective, the Bregman reference and the baselines."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from smart_core import (
    METHOD_PRESETS,
    MethodConfig,
    ModelFns,
    Objective,
    ProximalReference,
    gradient_norm_ratio,
    method_config,
)

from . import reference as ref
from .toy import ToyEncoder, toy_batch


def _train(objective_cfg: MethodConfig | None, steps: int = 5, seed: int = 0) -> list[torch.Tensor]:
    """A few AdamW steps with dropout on; objective_cfg=None is hand-written vanilla fine-tuning."""
    torch.manual_seed(seed)
    model = ToyEncoder(dropout=0.1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    objective = None
    if objective_cfg is not None:
        objective = Objective(objective_cfg, regression=False, module=model, planned_updates=steps)
    for step in range(steps):
        ids, mask, labels = toy_batch(seed=step)
        if objective is None:
            loss = F.cross_entropy(model.from_embeddings(model.embed(ids), mask), labels)
        else:
            loss, _ = objective(model.fns(ids, mask), labels)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if objective is not None:
            objective.after_update()
    return [p.detach().clone() for p in model.parameters()]


def test_zero_weights_are_bitwise_vanilla() -> None:
    """λ_s = μ = 0: no extra forward, no extra random draw, identical weights after training with dropout."""
    plain = _train(None)
    for cfg in (MethodConfig(lambda_s=0.0, mu=0.0), method_config("vanilla")):
        assert all(torch.equal(a, b) for a, b in zip(plain, _train(cfg), strict=True))
    smart = _train(MethodConfig(lambda_s=1.0, mu=1.0, epsilon=1e-2))
    assert not all(torch.equal(a, b) for a, b in zip(plain, smart, strict=True))


def test_momentum_reference_follows_the_ema_formula() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    planned = 20
    ref = ProximalReference(model, MethodConfig(), planned_updates=planned)
    expected = [p.detach().clone() for p in model.parameters()]  # θ̃ = θ₀
    for k in range(1, planned + 1):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        ref.after_update()
        beta = 0.99 if k <= math.ceil(0.1 * planned) else 0.999
        assert ref.beta(k) == beta
        expected = [
            (1 - beta) * p.detach() + beta * e for p, e in zip(model.parameters(), expected, strict=True)
        ]
        for s, e in zip(ref.shadow, expected, strict=True):
            torch.testing.assert_close(s, e)
    assert ref.beta(2) == 0.99 and ref.beta(3) == 0.999


def test_reference_is_fixed_during_the_inner_updates() -> None:
    model = torch.nn.Linear(3, 2)
    ref = ProximalReference(model, MethodConfig(bregman="vanilla", inner_updates=3), planned_updates=9)
    held = ref.shadow[0].clone()  # θ̃ = θ₀
    for k in range(1, 7):
        with torch.no_grad():
            model.weight.add_(1.0)
        ref.after_update()
        if k % 3:
            assert torch.equal(ref.shadow[0], held)  # inside an outer iteration: fixed
        else:
            assert torch.equal(ref.shadow[0], model.weight)  # VBPP: θ̃ ← θ at the outer iteration's end
            held = model.weight.detach().clone()


def test_vbpp_with_one_inner_update_is_rejected() -> None:
    with pytest.raises(ValueError, match="no-op"):
        MethodConfig(bregman="vanilla", inner_updates=1)
    MethodConfig(bregman="vanilla", inner_updates=2)


def test_teacher_forward_builds_no_graph_and_swaps_back() -> None:
    torch.manual_seed(0)
    model = ToyEncoder()
    ref = ProximalReference(model, MethodConfig(), planned_updates=10)
    with torch.no_grad():
        model.head.weight.add_(1.0)
    ids, mask, _ = toy_batch()
    out = ref.outputs(lambda: model.from_embeddings(model.embed(ids), mask))
    assert not out.requires_grad
    torch.testing.assert_close(ref.shadow[-2] + 1.0, model.head.weight)  # the student weights are back


def test_bregman_term_is_zero_at_start_and_grows() -> None:
    torch.manual_seed(0)
    model = ToyEncoder()
    objective = Objective(
        method_config("smart-breg-only"), regression=False, module=model, planned_updates=10
    )
    ids, mask, labels = toy_batch()
    _, parts = objective(model.fns(ids, mask), labels)
    assert parts["d_breg"].item() == pytest.approx(0.0, abs=1e-7)
    with torch.no_grad():
        model.head.weight.add_(
            torch.randn_like(model.head.weight)
        )  # a uniform shift would not change softmax
    _, parts = objective(model.fns(ids, mask), labels)
    assert parts["d_breg"].item() > 1e-4


def test_components_are_reported() -> None:
    torch.manual_seed(0)
    model = ToyEncoder()
    objective = Objective(
        MethodConfig(),
        regression=False,
        module=model,
        planned_updates=10,
        diagnostic_params=list(model.head.parameters()),
    )
    ids, mask, labels = toy_batch()
    loss, parts = objective(model.fns(ids, mask), labels)
    for key in (
        "loss",
        "task_loss",
        "r_s",
        "d_breg",
        "delta_linf",
        "delta_l2",
        "grad_ratio_rs",
        "step_to_noise",
        "fp32_step",
        "nonfinite_skips",
        "r_s_control",
        "ascent_signal",
    ):
        assert key in parts and torch.isfinite(parts[key]), key
        assert not parts[key].requires_grad and parts[key].shape == (), key
    assert parts["delta_linf"].item() <= 1e-5 * (1 + 1e-6)
    assert parts["fp32_step"].item() == 0.0 and parts["nonfinite_skips"].item() == 0.0
    torch.testing.assert_close(parts["loss"], parts["task_loss"] + parts["r_s"] + parts["d_breg"])
    assert model.head.weight.grad is None  # the diagnostic does not touch .grad
    loss.backward()
    assert objective.nonfinite_skips == 0 and objective.steps == 0


def test_freelb_accumulates_parameter_gradients() -> None:
    torch.manual_seed(0)
    model = ToyEncoder()
    ids, mask, labels = toy_batch()
    objective = Objective(method_config("freelb", adv_steps=3), regression=False)
    loss, parts = objective(model.fns(ids, mask), labels)
    partial = model.head.weight.grad.clone()  # steps 1..K-1 already back-propagated
    assert partial.abs().sum() > 0
    loss.backward()
    assert not torch.equal(model.head.weight.grad, partial)
    assert parts["delta_l2"].item() > 0


@pytest.mark.parametrize("name", sorted(METHOD_PRESETS))
def test_every_method_fits_a_separable_toy_task(name: str) -> None:
    torch.manual_seed(0)
    model = ToyEncoder(hidden=16)
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    cfg = method_config(name, epsilon=1e-3) if name.startswith("smart") else method_config(name)
    objective = Objective(cfg, regression=False, module=model, planned_updates=100)
    ids, mask, labels = toy_batch(batch=64, seed=1)
    for _ in range(100):
        loss, _ = objective(model.fns(ids, mask), labels)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        objective.after_update()
    with torch.no_grad():
        accuracy = (model.from_embeddings(model.embed(ids), mask).argmax(-1) == labels).float().mean().item()
    assert accuracy >= 0.95, f"{name}: {accuracy}"


def test_regression_objective_runs() -> None:
    torch.manual_seed(0)
    model = ToyEncoder(outputs=1)
    ids, mask, _ = toy_batch()
    targets = torch.linspace(0, 5, 8)
    objective = Objective(MethodConfig(epsilon=1e-2), regression=True, module=model, planned_updates=4)
    loss, parts = objective(model.fns(ids, mask), targets)
    loss.backward()
    assert parts["r_s"].item() > 0 and parts["d_breg"].item() == pytest.approx(0.0, abs=1e-9)


def test_bad_configs_name_the_field() -> None:
    with pytest.raises(ValueError, match="lambda_s"):
        MethodConfig(lambda_s=-1.0)
    with pytest.raises(ValueError, match="inner_updates"):
        MethodConfig(inner_updates=0)
    with pytest.raises(ValueError, match="unknown method"):
        method_config("smarter")


def test_teacher_runs_without_dropout_unless_asked() -> None:
    torch.manual_seed(0)
    model = ToyEncoder(dropout=0.5)
    model.train()
    ids, mask, _ = toy_batch()
    forward = lambda: model.from_embeddings(model.embed(ids), mask)  # noqa: E731
    deterministic = ProximalReference(model, MethodConfig(), planned_updates=10)
    torch.testing.assert_close(deterministic.outputs(forward), deterministic.outputs(forward))
    assert model.training and model.dropout.training  # modes restored
    noisy = ProximalReference(model, MethodConfig(teacher_dropout=True), planned_updates=10)
    assert not torch.equal(noisy.outputs(forward), noisy.outputs(forward))


def test_gradient_norm_ratio() -> None:
    torch.manual_seed(0)
    model = ToyEncoder().double()
    ids, mask, labels = toy_batch()
    out = model.from_embeddings(model.embed(ids), mask)
    a, b = out.pow(2).sum(), F.cross_entropy(out, labels)
    head = list(model.head.parameters())
    ga = torch.autograd.grad(a, head, retain_graph=True)
    gb = torch.autograd.grad(b, head, retain_graph=True)
    expected = torch.sqrt(sum(g.pow(2).sum() for g in ga)) / torch.sqrt(sum(g.pow(2).sum() for g in gb))
    value = gradient_norm_ratio(a, b, head)
    torch.testing.assert_close(value.double(), expected, rtol=1e-6, atol=0)
    assert not value.requires_grad and all(p.grad is None for p in head)
    frozen = [torch.nn.Parameter(torch.zeros(2), requires_grad=False)]
    assert gradient_norm_ratio(b, b, frozen).item() == 0.0
    assert gradient_norm_ratio(b.detach(), b, head).item() == 0.0
    assert gradient_norm_ratio(b, b.detach(), head).item() == 0.0
    unused = torch.nn.Parameter(torch.ones(3))
    torch.testing.assert_close(
        gradient_norm_ratio(b, b, [*head, unused]).double(), torch.tensor(1.0, dtype=torch.float64)
    )
    a.backward()  # the graph was retained
    assert all(p.grad is not None for p in head)


def test_nonfinite_skips_accumulate_on_the_device() -> None:
    class NanGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:  # noqa: ARG004
            return x.clone()

        @staticmethod
        def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:  # noqa: ARG004
            return grad * float("nan")

    torch.manual_seed(0)
    model = ToyEncoder()
    ids, mask, labels = toy_batch()
    objective = Objective(method_config("smart-rs-only"), regression=False)
    bad = ModelFns(lambda: model.embed(ids), lambda e: model.from_embeddings(NanGrad.apply(e), mask), mask)
    for _ in range(3):
        loss, parts = objective(bad, labels)
        assert parts["nonfinite_skips"].item() == 1.0 and parts["r_s"].item() == 0.0
        torch.testing.assert_close(loss.detach(), parts["task_loss"])
    objective(model.fns(ids, mask), labels)
    assert objective.nonfinite_skips == 3
    objective.nonfinite_skips = 7  # restored from a checkpoint
    objective(bad, labels)
    assert objective.nonfinite_skips == 8 and isinstance(objective.nonfinite_skips, int)


@pytest.mark.parametrize("noise", ["uniform", "normal"])
@pytest.mark.parametrize("regression", [False, True], ids=["classification", "regression"])
def test_r3f_matches_aghajanyan(noise: str, regression: bool) -> None:
    """R3F (Aghajanyan et al. 2021, Eq. 2-3): L = ℓ(f(x), y) + λ·KL_S(f(x + z) ‖ f(x)), z ~ U(−σ, σ) or
    N(0, σ²) on the embeddings, no ascent step; both forwards keep their graph."""
    torch.manual_seed(0)
    model = ToyEncoder(outputs=1 if regression else 2).double()
    ids, mask, labels = toy_batch()
    targets = torch.linspace(0.0, 2.0, 8, dtype=torch.float64) if regression else labels
    cfg = method_config("r3f", noise=noise, sigma=0.05, lambda_s=2.5, diagnostics_every=0)
    calls: list[int] = []

    def forward(e: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return model.from_embeddings(e, mask)

    objective = Objective(cfg, regression=regression, generator=torch.Generator().manual_seed(3))
    loss, parts = objective(ModelFns(lambda: model.embed(ids), forward, mask), targets)
    assert len(calls) == 2  # f(x) and f(x + z): no ascent forward
    gen = torch.Generator().manual_seed(3)
    if noise == "uniform":
        z = torch.rand(model.embed(ids).shape, generator=gen, dtype=torch.float32) * 2 - 1
    else:
        z = torch.randn(model.embed(ids).shape, generator=gen, dtype=torch.float32)
    z = z.double() * 0.05 * mask.unsqueeze(-1)
    x = model.embed(ids)
    clean = model.from_embeddings(x, mask)
    noisy = model.from_embeddings(x + z, mask)
    r3f = ref.squared(noisy, clean) if regression else ref.sym_kl(noisy, clean)
    expected = ref.loss_fn(regression)(clean, targets) + 2.5 * r3f
    torch.testing.assert_close(parts["r_s"], r3f.detach(), rtol=1e-6, atol=0)
    torch.testing.assert_close(loss, expected, rtol=1e-7, atol=0)
    params = list(model.parameters())
    for a, b in zip(ref.grads(loss, params), ref.grads(expected, params), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-12)
    assert parts["step_to_noise"].item() == 0.0 and "d_breg" not in parts
    torch.testing.assert_close(parts["delta_linf"].double(), z.abs().max(), rtol=1e-6, atol=0)


def test_gradient_norm_ratio_of_a_term_that_misses_the_parameters_is_zero() -> None:
    torch.manual_seed(0)
    model = ToyEncoder()
    ids, mask, labels = toy_batch()
    task = F.cross_entropy(model.from_embeddings(model.embed(ids), mask), labels)
    elsewhere = torch.ones(3, requires_grad=True).pow(2).sum()  # no parameter of the head in its graph
    assert gradient_norm_ratio(elsewhere, task, list(model.head.parameters())).item() == 0.0


@pytest.mark.parametrize("regression", [False, True], ids=["classification", "regression"])
def test_objective_runs_freelb_as_freelb_loss_does(regression: bool) -> None:
    """The Objective hands FreeLB its task kind and the noise generator."""
    from smart_core import freelb_loss

    cfg = method_config("freelb", adv_init_mag=0.2, adv_steps=2)
    runs = []
    for via_objective in (True, False):
        torch.manual_seed(0)
        model = ToyEncoder(outputs=1 if regression else 2).double()
        ids, mask, labels = toy_batch()
        targets = torch.linspace(0.0, 1.0, 8, dtype=torch.float64) if regression else labels
        torch.manual_seed(1)
        if via_objective:
            objective = Objective(cfg, regression=regression, generator=torch.Generator().manual_seed(5))
            loss, parts = objective(model.fns(ids, mask), targets)
        else:
            fns = model.fns(ids, mask)
            gen = torch.Generator().manual_seed(5)
            loss, parts = freelb_loss(fns.embed, fns.forward, mask, targets, cfg, regression, gen)
        loss.backward()
        runs.append((loss.detach(), parts["adv_loss"], [p.grad.clone() for p in model.parameters()]))
    (la, aa, ga), (lb, ab, gb) = runs
    assert torch.equal(la, lb) and torch.equal(aa, ab)
    assert all(torch.equal(a, b) for a, b in zip(ga, gb, strict=True))


def test_ascent_signal_draws_from_the_objectives_generator() -> None:
    """The diagnostics run before the step's own passes and put the generator back, so the diagnostic's ν is
    the ascent's: the signal is that of the direction the step ascends along."""
    torch.manual_seed(0)
    model = ToyEncoder().double()
    ids, mask, labels = toy_batch()
    cfg = method_config("smart-rs-only", sigma=0.3, epsilon=1e-2, diagnostics_every=1)
    generator = torch.Generator().manual_seed(3)
    objective = Objective(cfg, regression=False, generator=generator)
    _, parts = objective(model.fns(ids, mask), labels)
    x = model.embed(ids)
    replay = torch.Generator().manual_seed(3)
    # The ascent's ν and the diagnostic's.
    nu = (torch.randn(x.shape, generator=replay) * 0.3 * mask.unsqueeze(-1)).double()
    assert torch.equal(generator.get_state(), replay.get_state())  # the diagnostic's draw was taken back
    clean = model.from_embeddings(x, mask).detach()

    def grad_at(d: torch.Tensor) -> torch.Tensor:
        d = d.clone().requires_grad_(True)
        (out,) = torch.autograd.grad(ref.sym_kl(model.from_embeddings(x.detach() + d, mask), clean) * 8, d)
        return out.flatten()

    plus, minus = grad_at(nu), grad_at(-nu)
    expected = -(plus @ minus) / (plus.norm() * minus.norm())
    assert expected.item() < 0.99
    torch.testing.assert_close(parts["ascent_signal"].double(), expected, rtol=1e-6, atol=0)


def test_default_planned_updates_is_one() -> None:
    model = ToyEncoder()
    objective = Objective(MethodConfig(beta_switch=1.0), regression=False, module=model)
    assert objective.reference is not None
    assert objective.reference.beta(1) == 0.99 and objective.reference.beta(2) == 0.999
