"""Autocast on CPU (bf16): the teacher's uncached forward, the fp32 fallback for small perturbations."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from smart_core import MethodConfig, Objective, method_config, task_loss
from smart_core.precision import (
    TF32,
    autocast_dtype,
    full_precision,
    needs_fp32,
    pass_rms,
    perturbation_rms,
    step_arithmetic,
    step_plan,
    uncached_autocast,
)

from . import reference as ref
from .toy import ToyEncoder, toy_batch

CPU = torch.device("cpu")


def bf16() -> torch.autocast:
    return torch.autocast("cpu", dtype=torch.bfloat16)


def _student_and_teacher_copy(only_linear: bool) -> tuple[ToyEncoder, ToyEncoder, Objective]:
    """A model whose MBPP reference holds θ₀, then the student moved away from it; and an independent deep
    copy carrying θ₀, the teacher's weights, in parameters of its own."""
    torch.manual_seed(0)
    model = ToyEncoder()
    teacher = copy.deepcopy(model)
    objective = Objective(
        method_config("smart-breg-only"), regression=False, module=model, planned_updates=10
    )
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not only_linear or name in ("layer.weight", "head.weight"):
                p.add_(torch.randn_like(p) * 0.3)
    return model, teacher, objective


@pytest.mark.parametrize("only_linear", [False, True], ids=["all-weights", "only-linear-weights"])
def test_teacher_under_autocast_is_its_own_weights_bit_for_bit(only_linear: bool) -> None:
    model, teacher, objective = _student_and_teacher_copy(only_linear)
    assert objective.reference is not None
    ids, mask, _ = toy_batch()
    forward = lambda: model.from_embeddings(model.embed(ids), mask)  # noqa: E731
    with bf16():
        expected = teacher.from_embeddings(teacher.embed(ids), mask)
    with bf16():
        student_alone = forward()
    with bf16():
        student = forward()  # fills autocast's weight cache with the student's bf16 weights
        got = objective.reference.outputs(forward)
        student_after = forward()  # and the teacher left no bf16 copy of θ̃ there either
    assert expected.dtype == torch.bfloat16 and got.dtype == torch.bfloat16
    assert torch.equal(got, expected.detach())
    assert not torch.equal(got, student.detach())
    assert torch.equal(student, student_alone) and torch.equal(student_after, student_alone)
    with bf16():  # the teacher first, the student after: same answers
        got_first = objective.reference.outputs(forward)
        student_second = forward()
    assert torch.equal(got_first, expected.detach()) and torch.equal(student_second, student_alone)


def test_d_breg_under_autocast_sees_the_teacher() -> None:
    model, teacher, objective = _student_and_teacher_copy(only_linear=True)
    ids, mask, labels = toy_batch()
    with bf16():
        loss, parts = objective(model.fns(ids, mask), labels)
        assert torch.is_autocast_enabled("cpu")
    assert "fp32_step" not in parts  # no R_s: nothing to resolve, the step stays in autocast
    with bf16():
        student = model.from_embeddings(model.embed(ids), mask)
        target = teacher.from_embeddings(teacher.embed(ids), mask)
    expected = ref.sym_kl(student, target)
    assert expected.item() > 1e-4
    torch.testing.assert_close(parts["d_breg"].double(), expected, rtol=1e-5, atol=0)
    loss.backward()
    assert model.layer.weight.grad is not None and model.layer.weight.grad.abs().sum() > 0


def _smart_step(
    cfg: MethodConfig, autocast: bool
) -> tuple[torch.Tensor, dict[str, torch.Tensor], list[torch.Tensor]]:
    torch.manual_seed(0)
    model = ToyEncoder()
    ids, mask, labels = toy_batch()
    objective = Objective(
        cfg, regression=False, module=model, planned_updates=10, generator=torch.Generator().manual_seed(1)
    )
    with torch.no_grad():
        model.head.weight.add_(torch.randn_like(model.head.weight) * 0.3)
    if autocast:
        with bf16():
            loss, parts = objective(model.fns(ids, mask), labels)
            assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    else:
        loss, parts = objective(model.fns(ids, mask), labels)
    loss.backward()
    return loss, parts, [p.grad.clone() for p in model.parameters()]


def test_a_paper_sized_step_leaves_autocast_and_matches_fp32() -> None:
    cfg = MethodConfig(epsilon=1e-5, sigma=1e-5)
    precision = torch.get_float32_matmul_precision()
    loss16, parts16, grads16 = _smart_step(cfg, autocast=True)
    assert torch.get_float32_matmul_precision() == precision  # restored after the step
    loss32, parts32, grads32 = _smart_step(cfg, autocast=False)
    assert parts16["fp32_step"].item() == 1.0 and parts32["fp32_step"].item() == 0.0
    assert parts32["r_s"].item() > 0
    torch.testing.assert_close(parts16["r_s"], parts32["r_s"], rtol=1e-6, atol=0)
    torch.testing.assert_close(parts16["d_breg"], parts32["d_breg"], rtol=1e-6, atol=0)
    torch.testing.assert_close(loss16, loss32, rtol=1e-6, atol=0)
    for a, b in zip(grads16, grads32, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-9)


def test_a_large_perturbation_stays_in_autocast() -> None:
    cfg = method_config("smart-renorm", sigma=0.5)  # ν and the final δ both above bf16's resolution
    _, parts16, _ = _smart_step(cfg, autocast=True)
    _, parts32, _ = _smart_step(cfg, autocast=False)
    assert parts16["fp32_step"].item() == 0.0
    assert parts16["r_s"].item() > 0
    assert not torch.equal(parts16["task_loss"], parts32["task_loss"])  # bf16 arithmetic: autocast was on


def test_regression_targets_are_not_rounded_under_autocast() -> None:
    torch.manual_seed(0)
    model = ToyEncoder(outputs=1)
    ids, mask, _ = toy_batch()
    targets = torch.tensor([3.8, 1.3, 2.7, 0.1, 4.9, 3.3, 2.2, 0.6])
    objective = Objective(method_config("smart-rs-only", epsilon=1e-3), regression=True)
    with bf16():
        _, parts = objective(model.fns(ids, mask), targets)
        predictions = model.from_embeddings(model.embed(ids), mask)
        assert predictions.dtype == torch.bfloat16
        direct = task_loss(predictions, targets, True)
    expected = ((predictions.double() - targets.double()) ** 2).mean()
    rounded = ((predictions.double() - targets.to(torch.bfloat16).double()) ** 2).mean()
    assert abs(expected.item() - rounded.item()) > 1e-4 * expected.item()
    torch.testing.assert_close(direct.double(), expected, rtol=1e-6, atol=0)
    assert parts["fp32_step"].item() == 1.0  # ε 1e-3 < bf16's 0.1: the step ran in fp32
    with full_precision(CPU):
        fp32_predictions = model.from_embeddings(model.embed(ids), mask)
    torch.testing.assert_close(
        parts["task_loss"].double(),
        ((fp32_predictions.double() - targets.double()) ** 2).mean(),
        rtol=1e-6,
        atol=0,
    )


def test_perturbation_rms() -> None:
    """The smallest per-element perturbation a step evaluates: the noise ν (where the first ascent gradient
    is taken) or the final δ, whichever is smaller; σ = 0 leaves the final δ."""
    hidden, elements = 16, 96
    assert perturbation_rms(MethodConfig(epsilon=1e-3, sigma=1e-2), hidden, elements) == 1e-3
    assert perturbation_rms(MethodConfig(epsilon=1e-3, sigma=1e-4), hidden, elements) == 1e-4
    assert perturbation_rms(MethodConfig(epsilon=1e-3, sigma=0.0), hidden, elements) == 1e-3
    two = MethodConfig(epsilon=1e-2, sigma=0.5, norm_p="2")
    assert perturbation_rms(two, hidden, elements) == pytest.approx(1e-2 / math.sqrt(elements))
    assert perturbation_rms(method_config("smart-renorm", sigma=0.5), hidden, elements) == 0.3
    renorm2 = method_config("smart-renorm", sigma=0.5, norm_p="2")
    assert perturbation_rms(renorm2, hidden, elements) == pytest.approx(1 / math.sqrt(hidden))
    assert perturbation_rms(method_config("smart-renorm", sigma=0.01), hidden, elements) == 0.01
    assert perturbation_rms(MethodConfig(ascent_steps=0, sigma=0.2, epsilon=1e-3), hidden, elements) == 0.2
    assert perturbation_rms(method_config("r3f", sigma=0.3), hidden, elements) == pytest.approx(
        0.3 / math.sqrt(3)
    )
    assert perturbation_rms(method_config("freelb"), hidden, elements) == math.inf
    assert perturbation_rms(method_config("pgd"), hidden, elements) == math.inf


def test_pass_rms_separates_the_ascent_from_the_final_perturbation() -> None:
    """(where an ascent gradient is taken, where R_s is measured): the first ascent gradient is taken at ν,
    later ones (T_x ≥ 2) at the projected δ too; R_s at the final δ."""
    hidden, elements = 16, 96
    assert pass_rms(MethodConfig(epsilon=1e-3, sigma=1e-2), hidden, elements) == (1e-2, 1e-3)
    assert pass_rms(MethodConfig(epsilon=1e-3, sigma=1e-2, ascent_steps=2), hidden, elements) == (1e-3, 1e-3)
    assert pass_rms(MethodConfig(epsilon=1e-2, sigma=1e-3, ascent_steps=2), hidden, elements) == (1e-3, 1e-2)
    assert pass_rms(MethodConfig(epsilon=1e-3, sigma=0.0, ascent_steps=3), hidden, elements) == (1e-3, 1e-3)
    assert pass_rms(MethodConfig(epsilon=1e-3, sigma=0.0), hidden, elements) == (math.inf, 1e-3)
    assert pass_rms(MethodConfig(ascent_steps=0, sigma=0.2), hidden, elements) == (math.inf, 0.2)


def test_needs_fp32() -> None:
    paper = MethodConfig()
    assert needs_fp32(paper, torch.bfloat16, 16, 96) and needs_fp32(paper, torch.float16, 16, 96)
    assert not needs_fp32(paper, None, 16, 96)
    assert not needs_fp32(paper, torch.float32, 16, 96)
    assert not needs_fp32(method_config("smart-breg-only"), torch.bfloat16, 16, 96)  # no R_s
    renorm = method_config("smart-renorm", sigma=0.5)
    assert not needs_fp32(renorm, torch.bfloat16, 16, 96) and needs_fp32(renorm, torch.float16, 16, 96)
    large = MethodConfig(epsilon=0.1, sigma=0.2)
    assert not needs_fp32(large, torch.bfloat16, 16, 96)  # exactly resolved
    assert needs_fp32(large.with_overrides(epsilon=0.0999), torch.bfloat16, 16, 96)
    assert not needs_fp32(method_config("pgd"), torch.bfloat16, 16, 96)
    renorm2 = method_config("smart-renorm", sigma=0.5, norm_p="2")  # RMS 1/√hidden
    assert needs_fp32(renorm2, torch.bfloat16, 128, 96) and not needs_fp32(renorm2, torch.bfloat16, 16, 96)
    ball2 = MethodConfig(epsilon=0.5, sigma=0.5, norm_p="2")  # RMS ε/√elements
    assert needs_fp32(ball2, torch.bfloat16, 16, 96) and not needs_fp32(ball2, torch.bfloat16, 16, 16)


@pytest.mark.parametrize(
    ("hidden", "overrides", "fp32"),
    [
        (16, {"epsilon": 0.8, "norm_p": "2"}, True),  # 0.8/√(T·H) = 0.08 (T 6, H 16), but 0.8/T = 0.13
        (16, {"epsilon": 1.2, "norm_p": "2"}, False),  # 1.2/√(T·H) = 0.12, but 1.2/H = 0.075
        (128, {"projection": "renorm", "grad_norm": "none", "norm_p": "2"}, True),  # 1/√H = 0.088
        (16, {"projection": "renorm", "grad_norm": "none", "norm_p": "2"}, False),  # 1/√H = 0.25
    ],
)
def test_the_step_measures_its_perturbation_on_the_batch(hidden: int, overrides: dict, fp32: bool) -> None:
    """Objective passes the example's size (T·H elements, H per token) to the resolution check."""
    torch.manual_seed(0)
    model = ToyEncoder(hidden=hidden)
    ids, mask, labels = toy_batch()
    assert model.embed(ids).shape[1:] == (6, hidden)
    cfg = method_config("smart-rs-only", sigma=1.0, **overrides)
    with bf16():
        _, parts = Objective(cfg, regression=False)(model.fns(ids, mask), labels)
    assert parts["fp32_step"].item() == float(fp32)


def test_autocast_helpers_restore_the_callers_settings() -> None:
    assert autocast_dtype(CPU) is None
    with uncached_autocast(CPU):
        assert not torch.is_autocast_enabled("cpu")
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("medium")
        with bf16():
            assert autocast_dtype(CPU) == torch.bfloat16
            assert torch.is_autocast_cache_enabled()
            with uncached_autocast(CPU):
                assert torch.is_autocast_enabled("cpu") and autocast_dtype(CPU) == torch.bfloat16
                assert not torch.is_autocast_cache_enabled()
            assert torch.is_autocast_cache_enabled()
            with full_precision(CPU):
                assert autocast_dtype(CPU) is None and torch.get_float32_matmul_precision() == "highest"
            assert autocast_dtype(CPU) == torch.bfloat16 and torch.get_float32_matmul_precision() == "medium"
            with pytest.raises(RuntimeError), full_precision(CPU):
                raise RuntimeError("boom")
            assert torch.get_float32_matmul_precision() == "medium" and autocast_dtype(CPU) == torch.bfloat16
    finally:
        torch.set_float32_matmul_precision(before)


def test_tf32_on_cuda_is_an_arithmetic_the_paper_perturbation_does_not_survive() -> None:
    paper = method_config("smart")
    saved = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision(
            "high"
        )  # TF32 on CUDA (measured: research/results/numerics_h200.json)
        assert step_arithmetic(torch.device("cuda")) == TF32
        assert step_arithmetic(torch.device("cpu")) is None  # CPU matmuls stay fp32 at "high"
        assert needs_fp32(paper, TF32, 16, 96)
        assert not needs_fp32(method_config("smart", epsilon=0.05, sigma=0.05), TF32, 16, 96)
        with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast's dtype comes first, TF32 or not
            assert step_arithmetic(torch.device("cpu")) == torch.bfloat16
        torch.set_float32_matmul_precision("highest")
        assert step_arithmetic(torch.device("cuda")) is None
    finally:
        torch.set_float32_matmul_precision(saved)


SHARED = {"rs_dropout": "shared", "rs_arithmetic": "auto"}


@pytest.mark.parametrize(
    ("preset", "overrides", "arithmetic", "plan"),
    [
        ("smart", SHARED, torch.bfloat16, (False, True, True)),  # ε = σ = 1e-5: the ascent and R_s linearised
        ("smart-renorm", SHARED, torch.bfloat16, (False, True, False)),  # δ ~ 1 per token: R_s plain
        ("r3f", SHARED, torch.bfloat16, (False, False, True)),  # no ascent
        ("smart", {"rs_dropout": "off", "rs_arithmetic": "auto"}, TF32, (False, True, True)),
        ("smart", {"rs_arithmetic": "auto"}, torch.bfloat16, (True, False, False)),  # independent: 2nd draw
        ("smart", {"rs_dropout": "shared"}, torch.bfloat16, (True, False, False)),  # the default: fp32
        ("smart", {**SHARED, "rs_arithmetic": "fp32"}, torch.bfloat16, (True, False, False)),
        ("smart", SHARED, torch.float16, (True, False, False)),  # fp16's limit is underflow
        ("smart", SHARED, None, (False, False, False)),  # fp32 resolves it
        ("smart", {**SHARED, "rs_arithmetic": "linearized"}, None, (False, True, True)),
        ("smart-renorm", {**SHARED, "rs_arithmetic": "linearized"}, None, (False, True, False)),
        (
            "smart",
            {**SHARED, "rs_arithmetic": "linearized", "epsilon": 0.1, "sigma": 0.1},
            None,
            (False, False, False),
        ),  # exactly bf16's resolution: resolved, as needs_fp32 reads it, so neither pass is linearised
        (
            "smart",
            {**SHARED, "rs_arithmetic": "linearized", "epsilon": 0.5, "sigma": 0.5},
            torch.float16,
            (False, True, True),
        ),  # asked for: below the arithmetic's resolution where it is coarser than bf16's (fp16: 1.0)
        ("smart", {**SHARED, "rs_arithmetic": "linearized"}, torch.float32, (False, True, True)),  # bf16's
        (
            "smart",
            {**SHARED, "rs_arithmetic": "linearized", "epsilon": 0.5, "sigma": 0.5},
            torch.float32,
            (False, False, False),
        ),  # plain fp32 asks for bf16's resolution only
        (
            "smart",
            {**SHARED, "epsilon": 0.2, "sigma": 0.2},
            torch.bfloat16,
            (False, False, False),
        ),  # resolved
        (
            "smart",
            {**SHARED, "epsilon": 1e-3, "sigma": 0.5},
            torch.bfloat16,
            (False, True, True),
        ),  # R_s's pass
        ("smart-breg-only", SHARED, torch.bfloat16, (False, False, False)),  # no R_s
    ],
)
def test_step_plan(
    preset: str, overrides: dict, arithmetic: torch.dtype | str | None, plan: tuple[bool, bool, bool]
) -> None:
    """Which of R_s's passes a step linearises (smart_core.linearized), or whether it leaves for fp32."""
    got = step_plan(method_config(preset, **overrides), arithmetic, hidden=16, elements=96)
    assert (got.fp32, got.linear_ascent, got.linear_outer) == plan
    assert got.linearized == (plan[1] or plan[2])
