"""How R_s's forwards treat dropout (rs_dropout), the diagnostics, and the random stream they leave."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from smart_core import MethodConfig, Objective, method_config
from smart_core.dropout import RngState, eval_mode, replaying

from . import reference as ref
from .toy import ToyEncoder, toy_batch


def _model(dropout: float = 0.3) -> tuple[ToyEncoder, Tensor, Tensor, Tensor]:
    torch.manual_seed(0)
    model = ToyEncoder(dropout=dropout).double()
    model.train()
    ids, mask, labels = toy_batch()
    return model, ids, mask, labels


def reference_step(
    model: ToyEncoder, ids: Tensor, mask: Tensor, labels: Tensor, cfg: MethodConfig, seed: int, mode: str
) -> tuple[Tensor, Tensor]:
    """task + λ·R_s for one batch, R_s by Algorithm 1 (batched: the inner loss is a sum over examples, so
    each example's gradient is its own), with the dropout of the R_s forwards:
      independent  every forward draws its masks in turn from the global stream;
      shared       every R_s forward first resets the stream to where the clean forward drew its masks;
      off          R_s's forwards, its clean reference included, in eval mode; the task loss keeps dropout.
    Returns (loss, R_s), float64."""

    def f(e: Tensor) -> Tensor:
        return model.from_embeddings(e, mask)

    x = model.embed(ids)
    state = torch.get_rng_state()
    clean = f(x)
    task = ref.cross_entropy(clean, labels)
    rs_x, rs_clean, fwd = x, clean, f
    if mode == "shared":

        def fwd(e: Tensor) -> Tensor:
            torch.set_rng_state(state)
            return f(e)

    elif mode == "off":
        model.eval()
        rs_x = model.embed(ids)
        rs_clean = f(rs_x)
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float32)
    delta = (noise * cfg.sigma * mask.unsqueeze(-1)).double()
    for _ in range(cfg.ascent_steps):
        delta.requires_grad_(True)
        inner = ref.sym_kl(fwd(rs_x.detach() + delta), rs_clean.detach()) * x.shape[0]
        (g,) = torch.autograd.grad(inner, delta)
        g = g / ref.example_norm(g, "inf")
        delta = ref.project_example_ball(delta.detach() + cfg.eta * g, "inf", cfg.epsilon) * mask.unsqueeze(
            -1
        )
    r_s = ref.sym_kl(fwd(rs_x + delta), rs_clean)
    model.train()
    return task + cfg.lambda_s * r_s, r_s


def _library_step(model: ToyEncoder, ids: Tensor, mask: Tensor, labels: Tensor, cfg: MethodConfig, seed: int):
    objective = Objective(cfg, regression=False, module=model, generator=torch.Generator().manual_seed(seed))
    return objective(model.fns(ids, mask), labels)


@pytest.mark.parametrize("mode", ["independent", "shared", "off"])
def test_rs_dropout_modes_match_the_reference(mode: str) -> None:
    model, ids, mask, labels = _model()
    cfg = method_config(
        "smart-rs-only", epsilon=1e-2, sigma=1e-3, rs_dropout=mode, diagnostics_every=1, lambda_s=1.5
    )
    params = list(model.parameters())
    torch.manual_seed(42)
    expected, r_s = reference_step(model, ids, mask, labels, cfg, 3, mode)
    after_reference = torch.get_rng_state()
    torch.manual_seed(42)
    loss, parts = _library_step(model, ids, mask, labels, cfg, 3)
    if mode != "shared":  # (the reference's shared resets leave the stream elsewhere)
        assert torch.equal(torch.get_rng_state(), after_reference)  # the same draws, in the same order
    assert model.training and model.dropout.training
    torch.testing.assert_close(parts["r_s"], r_s.detach(), rtol=1e-6, atol=0)  # δ is fp32
    torch.testing.assert_close(loss, expected, rtol=1e-9, atol=0)
    for a, b in zip(ref.grads(loss, params), ref.grads(expected, params), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-12)
    # The control: R_s at δ = 0 measures what dropout alone contributes.
    if mode == "independent":
        assert parts["r_s_control"].item() > 1e-3  # two dropout draws differ: an R-Drop term
        assert parts["r_s"].item() > 1e-3
    else:
        assert parts["r_s_control"].item() == 0.0
        assert parts["r_s"].item() < 1e-3  # only the perturbation is left
    assert 0.9 < parts["ascent_signal"].item() <= 1.0 + 1e-6 or mode == "independent"
    if mode == "independent":
        assert abs(parts["ascent_signal"].item()) < 0.9  # a second dropout draw drowns the direction


def test_rs_dropout_off_needs_the_module() -> None:
    with pytest.raises(ValueError, match="rs_dropout"):
        Objective(method_config("smart-rs-only", rs_dropout="off"), regression=False)
    Objective(method_config("smart-rs-only", rs_dropout="shared"), regression=False)
    Objective(method_config("smart-breg-only", rs_dropout="off", mu=0.0), regression=False)  # no R_s


def _train(
    cfg: MethodConfig, generator: bool, steps: int = 4
) -> tuple[list[Tensor], list[dict[str, Tensor]]]:
    torch.manual_seed(0)
    model = ToyEncoder(dropout=0.3)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    objective = Objective(
        cfg,
        regression=False,
        module=model,
        planned_updates=steps,
        generator=torch.Generator().manual_seed(1) if generator else None,
    )
    history = []
    for step in range(steps):
        ids, mask, labels = toy_batch(seed=step)
        loss, parts = objective(model.fns(ids, mask), labels)
        history.append(parts)
        opt.zero_grad()
        loss.backward()
        opt.step()
        objective.after_update()
    assert objective.steps == steps
    return [p.detach().clone() for p in model.parameters()], history


@pytest.mark.parametrize("mode", ["independent", "shared", "off"])
@pytest.mark.parametrize("generator", [False, True], ids=["global-rng", "own-generator"])
def test_diagnostics_do_not_change_the_trajectory(mode: str, generator: bool) -> None:
    base = MethodConfig(epsilon=1e-2, sigma=1e-3, rs_dropout=mode, teacher_dropout="independent")
    quiet, quiet_parts = _train(base.with_overrides(diagnostics_every=0), generator)
    loud, loud_parts = _train(base.with_overrides(diagnostics_every=1), generator)
    assert all(torch.equal(a, b) for a, b in zip(quiet, loud, strict=True))
    assert all("r_s_control" not in p and "ascent_signal" not in p for p in quiet_parts)
    assert all("r_s_control" in p and "ascent_signal" in p for p in loud_parts)
    for a, b in zip(quiet_parts, loud_parts, strict=True):
        assert torch.equal(a["r_s"], b["r_s"]) and torch.equal(a["d_breg"], b["d_breg"])


def test_diagnostics_run_every_n_steps() -> None:
    _, history = _train(MethodConfig(epsilon=1e-2, diagnostics_every=2), generator=True, steps=5)
    assert ["r_s_control" in p for p in history] == [True, False, True, False, True]
    _, history = _train(method_config("r3f", sigma=1e-2, diagnostics_every=3), generator=True, steps=4)
    assert ["r_s_control" in p for p in history] == [True, False, False, True]
    assert all("ascent_signal" not in p for p in history)  # R3F has no ascent to measure
    _, history = _train(MethodConfig(epsilon=1e-2, sigma=0.0, diagnostics_every=1), generator=True, steps=1)
    assert "r_s_control" in history[0] and "ascent_signal" not in history[0]  # no noise: nothing to mirror


def test_rng_helpers() -> None:
    torch.manual_seed(5)
    state = RngState.capture(torch.device("cpu"))
    assert state.accelerator is None and state.device == torch.device("cpu")
    first = torch.rand(3)
    with replaying(state):
        assert torch.equal(torch.rand(3), first)  # the body starts from the saved state
    second = torch.rand(3)
    torch.manual_seed(5)
    torch.rand(3)
    assert torch.equal(torch.rand(3), second)  # and the stream resumes as if the body drew nothing
    with replaying(None):
        third = torch.rand(3)
    assert not torch.equal(third, second)
    state.restore()
    assert torch.equal(torch.rand(3), first)


def test_eval_mode_restores_each_submodules_own_mode() -> None:
    model = ToyEncoder(dropout=0.5)
    model.train()
    model.norm.eval()  # a mixed state, as e.g. a frozen sub-block
    with eval_mode(model):
        assert not any(m.training for m in model.modules())
    assert model.training and model.dropout.training and not model.norm.training
    with pytest.raises(RuntimeError), eval_mode(model):
        raise RuntimeError("boom")
    assert model.training and not model.norm.training
    with eval_mode(None):
        assert model.training


def _counting(fn: Callable[[Tensor], Tensor], counter: list[int]) -> Callable[[Tensor], Tensor]:
    def wrapped(e: Tensor) -> Tensor:
        counter.append(1)
        return fn(e)

    return wrapped


def test_zero_weights_draw_nothing_and_run_one_forward() -> None:
    model, ids, mask, labels = _model()
    calls: list[int] = []
    fns = model.fns(ids, mask)
    fns.forward = _counting(fns.forward, calls)
    torch.manual_seed(3)
    objective = Objective(MethodConfig(lambda_s=0.0, mu=0.0), regression=False, module=model)
    loss, parts = objective(fns, labels)
    after = torch.get_rng_state()
    torch.manual_seed(3)
    plain = model.from_embeddings(model.embed(ids), mask)
    assert torch.equal(torch.get_rng_state(), after) and len(calls) == 1
    torch.testing.assert_close(loss, ref.cross_entropy(plain, labels), rtol=1e-12, atol=0)
    assert set(parts) == {"task_loss", "loss"}
