"""The Bregman proximal reference θ̃: MBPP / VBPP schedules, the swap, the teacher's dropout modes."""

from __future__ import annotations

import math

import pytest
import torch

from smart_core import MethodConfig, Objective, ProximalReference
from smart_core.dropout import RngState

from . import reference as ref
from .toy import ToyEncoder, toy_batch


@pytest.mark.parametrize("inner", [2, 3])
def test_mbpp_with_several_inner_updates(inner: int) -> None:
    """S > 1: θ̃ stays fixed during the S updates of an outer iteration, then θ̃ ← (1 − β)θ + βθ̃ with β
    from the schedule at the update that closes the iteration (β early for the first ⌈0.1·planned⌉)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    planned = 40
    cfg = MethodConfig(inner_updates=inner, beta_early=0.5, beta_late=0.9, beta_switch=0.1)
    reference = ProximalReference(model, cfg, planned_updates=planned)
    switch = math.ceil(0.1 * planned)  # 4
    theta0 = [p.detach().clone() for p in model.parameters()]
    expected = [t.clone() for t in theta0]
    refreshes = 0
    for k in range(1, 4 * inner + 1):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        reference.after_update()
        assert reference.updates_done == k
        if k % inner == 0:  # the end of outer iteration k / S
            beta = 0.5 if k <= switch else 0.9
            expected = [
                (1 - beta) * p.detach() + beta * e for p, e in zip(model.parameters(), expected, strict=True)
            ]
            refreshes += 1
        for s, e in zip(reference.shadow, expected, strict=True):
            torch.testing.assert_close(s, e, rtol=1e-6, atol=1e-7)
    assert refreshes == 4
    assert not torch.equal(reference.shadow[0], theta0[0])
    # The schedule itself: β early up to and including update ⌈0.1·planned⌉.
    assert [reference.beta(k) for k in (1, switch, switch + 1, planned)] == [0.5, 0.5, 0.9, 0.9]


def test_vbpp_copies_the_previous_outer_iterate() -> None:
    model = torch.nn.Linear(3, 2)
    reference = ProximalReference(model, MethodConfig(bregman="vanilla", inner_updates=2), planned_updates=8)
    for k in range(1, 7):
        with torch.no_grad():
            model.weight.mul_(1.5).add_(0.25)
        reference.after_update()
        if k % 2 == 0:
            assert torch.equal(reference.shadow[0], model.weight) and torch.equal(
                reference.shadow[1], model.bias
            )
            assert reference.shadow[0].data_ptr() != model.weight.data_ptr()  # a copy, not an alias
        else:
            assert not torch.equal(reference.shadow[0], model.weight)


def test_refusals() -> None:
    model = torch.nn.Linear(3, 2)
    with pytest.raises(ValueError, match="bregman"):
        ProximalReference(model, MethodConfig(bregman="none"), planned_updates=10)
    with pytest.raises(ValueError, match="planned_updates"):
        ProximalReference(model, MethodConfig(), planned_updates=0)
    ProximalReference(model, MethodConfig(), planned_updates=1)
    with pytest.raises(ValueError, match="module"):
        Objective(MethodConfig(), regression=False)


def test_only_trainable_parameters_are_tracked_and_swapped() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 2))
    model[0].weight.requires_grad_(False)
    reference = ProximalReference(model, MethodConfig(), planned_updates=10)
    assert len(reference.shadow) == 3
    frozen = model[0].weight.detach().clone()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    teacher = [s.clone() for s in reference.shadow]
    with reference.swapped():
        assert torch.equal(model[0].weight, frozen + 1.0)  # untracked: stays the student's
        assert torch.equal(model[1].weight, teacher[1]) and torch.equal(model[1].bias, teacher[2])
        assert torch.equal(model[0].bias, teacher[0])
    with pytest.raises(RuntimeError), reference.swapped():
        raise RuntimeError("boom")
    assert torch.equal(model[0].weight, frozen + 1.0)
    torch.testing.assert_close(reference.shadow[1] + 1.0, model[1].weight)  # swapped back after the error


def test_state_dict_round_trip() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    reference = ProximalReference(model, MethodConfig(inner_updates=2), planned_updates=10)
    for _ in range(3):
        with torch.no_grad():
            model.weight.add_(1.0)
        reference.after_update()
    state = reference.state_dict()
    again = ProximalReference(model, MethodConfig(inner_updates=2), planned_updates=10)
    assert not torch.equal(again.shadow[0], reference.shadow[0])
    again.load_state_dict(state)
    assert again.updates_done == 3 and isinstance(again.updates_done, int)
    assert all(torch.equal(a, b) for a, b in zip(again.shadow, reference.shadow, strict=True))
    state["shadow"][0].add_(5.0)  # the state is a copy, in both directions
    assert all(torch.equal(a, b) for a, b in zip(again.shadow, reference.shadow, strict=True))
    with pytest.raises(ValueError):  # a checkpoint of another model: one tensor too many
        again.load_state_dict({"shadow": [*state["shadow"], torch.zeros(2)], "updates_done": 3})
    with pytest.raises(ValueError):  # or one too few
        again.load_state_dict({"shadow": state["shadow"][:-1], "updates_done": 3})
    # The next refresh continues the schedule where it stopped (update 4 closes an outer iteration).
    with torch.no_grad():
        model.weight.add_(1.0)
    before = again.shadow[0].clone()
    again.after_update()
    torch.testing.assert_close(again.shadow[0], 0.001 * model.weight.detach() + 0.999 * before)  # β late


def _dropout_model() -> tuple[ToyEncoder, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = ToyEncoder(dropout=0.3)
    model.train()
    ids, mask, labels = toy_batch()
    return model, ids, mask, labels


def test_teacher_dropout_modes() -> None:
    model, ids, mask, _ = _dropout_model()
    forward = lambda: model.from_embeddings(model.embed(ids), mask)  # noqa: E731
    off = ProximalReference(model, MethodConfig(teacher_dropout="off"), planned_updates=10)
    with torch.no_grad():
        model.eval()
        eval_out = forward()
        model.train()
    assert torch.equal(off.outputs(forward), eval_out)  # eval mode, deterministic
    assert model.training and model.dropout.training and model.norm.training  # modes restored
    independent = ProximalReference(model, MethodConfig(teacher_dropout="independent"), planned_updates=10)
    a, b = independent.outputs(forward), independent.outputs(forward)
    assert not torch.equal(a, b) and not torch.equal(a, eval_out)
    shared = ProximalReference(model, MethodConfig(teacher_dropout="shared"), planned_updates=10)
    state = RngState.capture(torch.device("cpu"))
    student = forward()
    after = torch.get_rng_state()
    teacher = shared.outputs(forward, state)
    assert torch.equal(teacher, student.detach()) and not teacher.requires_grad  # θ̃ = θ₀ = θ, same masks
    assert torch.equal(torch.get_rng_state(), after)  # the replay consumed nothing
    with pytest.raises(ValueError, match="clean_rng"):  # shared masks without the clean forward's state
        shared.outputs(forward)


@pytest.mark.parametrize("rs", [True, False], ids=["with-r_s", "breg-only"])
def test_shared_teacher_dropout_gives_zero_d_breg_at_the_start(rs: bool) -> None:
    """teacher_dropout shared, θ = θ̃, train mode with dropout: the teacher replays the student's masks, its
    embedding's included, so D_Breg is exactly 0; off and independent see other masks (D_Breg > 0)."""
    for mode in ("shared", "off", "independent"):
        model, ids, mask, labels = _dropout_model()
        cfg = MethodConfig(
            teacher_dropout=mode, lambda_s=1.0 if rs else 0.0, epsilon=1e-3, rs_dropout="independent"
        )
        objective = Objective(cfg, regression=False, module=model, planned_updates=10)
        _, parts = objective(model.fns(ids, mask), labels)
        if mode == "shared":
            assert parts["d_breg"].item() == 0.0
        else:
            assert parts["d_breg"].item() > 1e-6, mode


def test_d_breg_is_the_symmetric_kl_to_the_teacher() -> None:
    """μ·D_Breg = μ·ℓ_s(f(x; θ), f(x; θ̃)), the gradient reaching θ only through the student."""
    torch.manual_seed(0)
    model = ToyEncoder().double()
    ids, mask, labels = toy_batch()
    teacher = ToyEncoder().double()
    teacher.load_state_dict(model.state_dict())
    objective = Objective(
        MethodConfig(lambda_s=0.0, mu=2.5), regression=False, module=model, planned_updates=10
    )
    with torch.no_grad():
        model.layer.weight.add_(torch.randn_like(model.layer.weight) * 0.3)
    loss, parts = objective(model.fns(ids, mask), labels)
    student = model.from_embeddings(model.embed(ids), mask)
    with torch.no_grad():
        target = teacher.from_embeddings(teacher.embed(ids), mask)
    d = ref.sym_kl(student, target)
    expected = ref.cross_entropy(student, labels) + 2.5 * d
    torch.testing.assert_close(parts["d_breg"], d.detach(), rtol=1e-9, atol=0)
    torch.testing.assert_close(loss, expected, rtol=1e-9, atol=0)
    params = list(model.parameters())
    for a, b in zip(ref.grads(loss, params), ref.grads(expected, params), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-12)
