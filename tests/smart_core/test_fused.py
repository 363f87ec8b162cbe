"""smart_core.fused: where the helpers run compiled, their eager gradients, the fallback, and (slow: inductor
compiles each helper on CPU in 10-20 s) the compiled layer norm, attention and linearised step against eager."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import Tensor
from torch.autograd import forward_ad
from torch.utils._python_dispatch import TorchDispatchMode

from smart_core import fused
from smart_core.attention import attention
from smart_core.layer_norm import layer_norm

# A helper whose compilation fails runs eager with a warning, and would then match eager trivially: in the
# compiled tests that warning is a failure (a mutant that breaks the traced path was caught only so).
COMPILED_FOR_REAL = pytest.mark.filterwarnings("error:smart_core.fused:UserWarning")


def _product(a: Tensor, b: Tensor, scale: float) -> Tensor:
    return (a * b).sin() * scale


class _Passing(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


def test_auto_runs_eager_on_cpu_and_on_compiles_anywhere() -> None:
    cpu = torch.device("cpu")
    with fused.fusing("auto"):
        assert not fused.enabled(cpu)
    with fused.fusing("on"):
        assert fused.enabled(cpu)
        with _Passing():  # bench.flops counts the eager step
            assert not fused.enabled(cpu)
        seen: list[bool] = []
        torch.func.grad(lambda x: (seen.append(fused.enabled(cpu)), x.sum())[1])(torch.ones(2))
        assert seen == [False]  # inside a functorch transform
    with fused.fusing("off"):
        assert not fused.enabled(cpu)


def test_auto_compiles_on_cuda_only_with_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = torch.device("cuda")
    for triton, expected in ((True, True), (False, False)):
        monkeypatch.setattr(fused, "_has_triton", lambda triton=triton: triton)
        with fused.fusing("auto"):
            assert fused.enabled(cuda) is expected
    with fused.fusing("off"):
        assert not fused.enabled(cuda)


def test_fusing_restores_the_mode_it_found() -> None:
    with fused.fusing("on"):
        with fused.fusing("off"):
            assert fused.mode() == "off"
        assert fused.mode() == "on"
        with pytest.raises(RuntimeError), fused.fusing("off"):
            raise RuntimeError("inside")
        assert fused.mode() == "on"
    assert fused.mode() == "auto"


def test_the_first_compile_raises_dynamos_recompile_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "compile", lambda fn, **_: fn)
    monkeypatch.setattr(fused, "_compiled", {})
    config = torch._dynamo.config  # a ConfigModule: monkeypatch's undo would delete the setting
    before = config.recompile_limit
    config.recompile_limit = 8
    try:
        with fused.fusing("on"):
            fused.function(_product)(torch.randn(3), torch.randn(3), 2.0)
        assert config.recompile_limit == fused.RECOMPILE_LIMIT
    finally:
        config.recompile_limit = before


def test_only_an_enabled_device_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[object] = []
    options: list[dict[str, object]] = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compiled.append(fn) or options.append(kw) or fn)
    monkeypatch.setattr(fused, "_compiled", {})
    a, b, grad = torch.randn(3), torch.randn(3), torch.randn(3)
    for helpers in ("auto", "off"):  # a CPU tensor: eager under both
        with fused.fusing(helpers):
            fused.function(_product)(a, b, 2.0)
            fused.vjp(_product, [True])(a, b, 2.0, grad)
    assert compiled == []
    with fused.fusing("on"):
        for _ in range(2):  # compiled once, then reused
            fused.function(_product)(a, b, 2.0)
            fused.vjp(_product, [True])(a, b, 2.0, grad)
    assert compiled[0] is _product and len(compiled) == 2
    # one graph each (a break would split it into more launches) and sizes symbolic from the first call (a
    # helper sees a new sequence length every batch)
    assert options == [{"dynamic": True, "fullgraph": True}] * 2


def test_a_mode_is_checked() -> None:
    with pytest.raises(ValueError, match="auto, on, off"):
        with fused.fusing("sometimes"):
            pass
    fused._state["mode"] = "yes"
    try:
        with pytest.raises(ValueError, match="SMARTUNE_FUSED_HELPERS"):
            fused.mode()
    finally:
        fused._state["mode"] = "auto"


def test_eager_gradients_are_autograds_with_zeros_for_an_unused_input() -> None:
    a, b, grad = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4)
    da, db = fused.vjp(_product, [True, True])(a, b, 0.5, grad)
    a_, b_ = a.clone().requires_grad_(), b.clone().requires_grad_()
    expected = torch.autograd.grad(_product(a_, b_, 0.5), [a_, b_], grad)
    torch.testing.assert_close((da, db), expected)
    (only_b,) = fused.vjp(_product, [False, True])(a, b, 0.5, grad)
    torch.testing.assert_close(only_b, expected[1])
    (unused,) = fused.vjp(lambda x, y: x * 2.0, [False, True])(a, b, grad)
    assert torch.equal(unused, torch.zeros_like(b))
    used, unused = fused.vjp(lambda x, y: x * 2.0, [True, True])(a, b, grad)  # the output needs grad, y not
    torch.testing.assert_close(used, 2.0 * grad)
    assert torch.equal(unused, torch.zeros_like(b))
    with pytest.raises(ValueError, match="at least one"):
        fused.vjp(_product, [False, False])


def test_a_helper_call_is_tallied_and_known_inside_only_while_it_runs() -> None:
    # bench.flops counts a helper's ops as one region from these two (tests/bench/test_flops.py)
    seen: list[bool] = []

    def probe(a: Tensor, b: Tensor, scale: float) -> Tensor:
        seen.append(fused.inside_helper())
        return _product(a, b, scale)

    calls = fused.helper_calls()
    assert not fused.inside_helper()
    with fused.fusing("off"):  # eager: the tally is the same
        fused.function(probe)(torch.ones(2), torch.ones(2), 1.0)
        # nested: inside in the inner helper, and in the outer one after the inner has returned
        fused.function(lambda a: (fused.function(probe)(a, a, 1.0), seen.append(fused.inside_helper()))[0])(
            torch.ones(2)
        )
    assert seen == [True, True, True] and not fused.inside_helper()
    assert fused.helper_calls() == calls + 3


def test_a_helper_that_fails_to_compile_runs_eager_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[int] = []

    def broken(fn: Any, **_: Any) -> Any:
        def run(*args: Any) -> Any:
            attempts.append(1)
            raise RuntimeError("no compiler here")

        return run

    monkeypatch.setattr(torch, "compile", broken)
    monkeypatch.setattr(fused, "_compiled", {})
    monkeypatch.setattr(fused, "_broken", set())
    a, b = torch.randn(3), torch.randn(3)
    with fused.fusing("on"):
        with pytest.warns(UserWarning, match="_product runs eager: compiling it failed"):
            first = fused.function(_product)(a, b, 2.0)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            second = fused.function(_product)(a, b, 2.0)
    assert torch.equal(first, _product(a, b, 2.0)) and torch.equal(second, first)
    assert attempts == [1]  # not compiled again


def test_running_out_of_memory_is_not_a_compiler_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    def out_of_memory(fn: Any, **_: Any) -> Any:
        def run(*args: Any) -> Any:
            raise torch.OutOfMemoryError("CUDA out of memory")

        return run

    monkeypatch.setattr(torch, "compile", out_of_memory)
    monkeypatch.setattr(fused, "_compiled", {})
    monkeypatch.setattr(fused, "_broken", set())
    with fused.fusing("on"), pytest.raises(torch.OutOfMemoryError):
        fused.function(_product)(torch.randn(3), torch.randn(3), 2.0)
    assert not fused._broken  # the helper stays compiled


def _layer_norm_tangent_and_grads(x: Tensor, w: Tensor, b: Tensor, dx: Tensor) -> list[Tensor]:
    leaves = [t.clone().requires_grad_() for t in (x, w, b, dx)]
    with forward_ad.dual_level():
        dual = forward_ad.make_dual(leaves[0], leaves[3])  # type: ignore[no-untyped-call]
        out, tangent = forward_ad.unpack_dual(layer_norm(dual, (x.shape[-1],), leaves[1], leaves[2]))  # type: ignore[no-untyped-call]
    loss = (out * torch.linspace(-1, 1, x.shape[-1])).sum() + tangent.pow(2).sum()
    return [tangent, *torch.autograd.grad(loss, leaves)]


@pytest.mark.slow
@COMPILED_FOR_REAL
def test_the_compiled_layer_norm_tangent_and_its_gradients_are_eagers() -> None:
    torch.manual_seed(0)
    x, dx = torch.randn(2, 5, 16) * 3 + 1, torch.randn(2, 5, 16)
    w, b = torch.randn(16), torch.randn(16)
    with fused.fusing("off"):
        expected = _layer_norm_tangent_and_grads(x, w, b, dx)
    with fused.fusing("on"):
        got = _layer_norm_tangent_and_grads(x, w, b, dx)
        bigger = _layer_norm_tangent_and_grads(torch.randn(3, 7, 16), w, b, torch.randn(3, 7, 16))
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert all(torch.isfinite(t).all() for t in bigger)  # dynamic sizes: another shape, no recompile error


def _attention_everything(inputs: list[Tensor], mask: Tensor, rate: float) -> list[Tensor]:
    q, k, v, dq, dk, dv = (t.clone().requires_grad_() for t in inputs)
    torch.manual_seed(5)  # the dropout seed
    with forward_ad.dual_level():
        duals = [forward_ad.make_dual(p, t) for p, t in ((q, dq), (k, dk), (v, dv))]  # type: ignore[no-untyped-call]
        out, tangent = forward_ad.unpack_dual(attention(*duals, attn_mask=mask, dropout_p=rate))  # type: ignore[no-untyped-call]
    loss = (out.sin()).sum() + tangent.pow(2).sum()
    return [out, tangent, *torch.autograd.grad(loss, [q, k, v, dq, dk, dv])]


@pytest.mark.slow
@COMPILED_FOR_REAL
def test_compiled_attention_is_eagers_in_value_tangent_and_gradients() -> None:
    torch.manual_seed(0)
    inputs = [torch.randn(2, 3, 9, 8) for _ in range(6)]  # (B, heads, T, D): q, k, v and their tangents
    mask = torch.ones(2, 1, 9, 9, dtype=torch.bool)
    mask[0, ..., 6:] = False  # padding keys
    with fused.fusing("off"):
        expected = _attention_everything(inputs, mask, 0.25)
    with fused.fusing("on"):
        got = _attention_everything(inputs, mask, 0.25)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@COMPILED_FOR_REAL
def test_a_linearised_step_with_compiled_helpers_is_the_eager_one() -> None:
    """The whole linearised objective under bf16 autocast (tiny BERT, dropout on, `shared` masks): R_s and
    every parameter's gradient, compiled helpers against eager ones."""
    from tests.smart_core.test_linearized import SETTINGS, cosine, objective_r_s, tiny_bert

    cfg = SETTINGS["ball"].with_overrides(diagnostics_every=0)
    runs = {}
    for helpers in ("off", "on"):
        model, batch = tiny_bert(dropout=0.1)
        torch.manual_seed(3)
        with fused.fusing(helpers):
            runs[helpers] = objective_r_s(model.train(), batch, cfg, autocast=True)
    (r_eager, g_eager, parts), (r_fused, g_fused, _) = runs["off"], runs["on"]
    assert parts["linearized_step"].item() == 1.0
    torch.testing.assert_close(r_fused, r_eager, rtol=0.02, atol=0)
    assert cosine(g_fused, g_eager) >= 0.999
