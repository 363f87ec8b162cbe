"""The combined objective, the Bregman reference and the baselines."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from smart_core import METHOD_PRESETS, MethodConfig, Objective, ProximalReference, method_config

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
    ):
        assert key in parts and torch.isfinite(parts[key]), key
    assert parts["delta_linf"].item() <= 1e-5 * (1 + 1e-6)
    assert model.head.weight.grad is None  # the diagnostic does not touch .grad
    loss.backward()


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
