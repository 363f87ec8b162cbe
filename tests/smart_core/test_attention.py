"""smart_core.attention: SDPA's values and derivatives, forward-mode included, with no T × T tensor kept (issue 28)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

import smart_core.attention as attention_module
from smart_core.attention import LightAttention, attention

from .op_count import OpCount

B, H, T, D = 2, 4, 7, 8
CASES: dict[str, dict[str, Any]] = {
    "plain": {},
    "bool mask": {"attn_mask": torch.ones(B, 1, T, T, dtype=torch.bool).tril(diagonal=2)},
    "additive mask": {"attn_mask": torch.zeros(B, 1, 1, T, dtype=torch.float64).index_fill(-1, torch.tensor([5, 6]), -1e9)},
    "causal": {"is_causal": True},
    "scale": {"scale": 0.3},
}  # fmt: skip


def _inputs(shape: tuple[int, ...] = (B, H, T, D)) -> list[Tensor]:
    """q, k, v and their tangents, fp64."""
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(*shape, dtype=torch.float64, generator=gen) for _ in range(6)]


def _primal_tangent_and_grads(fn: Callable[..., Tensor], inputs: list[Tensor]) -> list[Tensor]:
    """[O, dO, then the gradient of a loss of both with respect to q, k, v and their tangents]."""
    leaves = [t.clone().requires_grad_(True) for t in inputs]
    with sdpa_kernel([SDPBackend.MATH]):  # the reference's only kernel with a forward-mode derivative
        out, tangent = torch.func.jvp(fn, tuple(leaves[:3]), tuple(leaves[3:]))
    loss = (tangent**2).sum() + (out * 1.7).sum()
    return [out.detach(), tangent.detach(), *torch.autograd.grad(loss, leaves)]


def _assert_matches_sdpa(inputs: list[Tensor], label: str, **kwargs: Any) -> None:
    """Ours and SDPA (math kernel) give the same primal, tangent and gradients on `inputs` with `kwargs`."""
    ours = _primal_tangent_and_grads(lambda q, k, v: attention(q, k, v, **kwargs), inputs)
    reference = _primal_tangent_and_grads(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs), inputs
    )
    for name, a, b in zip(["O", "dO", "q", "k", "v", "dq", "dk", "dv"], ours, reference, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=f"{label}: {name}")


def _cross_inputs(batch: tuple[int, ...], tq: int, tk: int, gen: torch.Generator) -> list[Tensor]:
    """q, k, v, dq, dk, dv (fp64) for Tq queries over Tk keys with the given batch dimensions."""
    q, dq = (torch.randn(*batch, tq, D, dtype=torch.float64, generator=gen) for _ in range(2))
    k, v, dk, dv = (torch.randn(*batch, tk, D, dtype=torch.float64, generator=gen) for _ in range(4))
    return [q, k, v, dq, dk, dv]


@pytest.fixture(params=["whole", "chunked"])
def chunks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """All query rows at once, or one at a time (the budget below a row's scores: chunks as at 512 tokens)."""
    if request.param == "chunked":
        monkeypatch.setattr(attention_module, "CHUNK_ELEMENTS", 1)
    return str(request.param)


@pytest.mark.parametrize("case", list(CASES))
def test_matches_sdpa_in_value_tangent_and_both_gradients(case: str, chunks: str) -> None:
    _assert_matches_sdpa(_inputs(), f"{case}, {chunks}", **CASES[case])


@pytest.mark.parametrize("lengths", [(3, 12), (12, 3)], ids=["fewer-queries", "more-queries"])  # 12 > D
@pytest.mark.parametrize("batch", [(B, H), (B * H,)], ids=["4-d", "3-d"])
def test_queries_and_keys_of_different_lengths_with_a_full_mask(
    batch: tuple[int, ...], lengths: tuple[int, int], chunks: str
) -> None:
    """Cross-attention's shapes: Tq queries over Tk keys, a (…, Tq, Tk) mask, inputs with one or two batch
    dimensions: the chunks run over the queries, the mask's rows with them."""
    tq, tk = lengths
    gen = torch.Generator().manual_seed(5)
    inputs = _cross_inputs(batch, tq, tk, gen)
    mask = torch.rand(*batch, tq, tk, generator=gen) > 0.3
    mask[..., 0] = True  # every query sees a key
    _assert_matches_sdpa(inputs, f"{batch}, {chunks}", attn_mask=mask)


@pytest.mark.parametrize("lengths", [(3, 12), (12, 3)], ids=["fewer-queries", "more-queries"])  # 12 > D
@pytest.mark.parametrize("batch", [(B, H), (B * H,)], ids=["4-d", "3-d"])
def test_causal_attention_over_keys_of_another_length_is_aligned_at_the_top_left_as_sdpas(
    batch: tuple[int, ...], lengths: tuple[int, int], chunks: str
) -> None:
    """SDPA's `is_causal` lets query i see keys 0..i whatever Tk (the upper-left alignment of its docs), so a
    query past the last key sees them all."""
    inputs = _cross_inputs(batch, *lengths, torch.Generator().manual_seed(8))
    _assert_matches_sdpa(inputs, f"{batch}, {chunks}", is_causal=True)


@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_a_mask_with_is_causal_applies_both_as_sdpas_kernels_do(kind: str) -> None:
    q, k, v = _inputs()[:3]
    keep = torch.rand(T, T, generator=torch.Generator().manual_seed(9)) > 0.3
    keep[:, 0] = True  # every query sees a key
    mask = keep if kind == "bool" else torch.zeros(T, T, dtype=torch.float64).masked_fill(~keep, -1e9)
    ours = attention(q, k, v, attn_mask=mask, is_causal=True)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True))
    assert not torch.allclose(ours, attention(q, k, v, attn_mask=mask))
    assert not torch.allclose(ours, attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_grouped_query_attention_repeats_the_key_heads(kv_heads: int) -> None:
    q, k, v = _inputs()[:3]
    kv = (k[:, :kv_heads], v[:, :kv_heads])  # 1 or 2 key/value heads for 4 query heads
    ours = attention(q, *kv, enable_gqa=True)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, *kv, enable_gqa=True))


def _with_dropout(seed: int) -> Callable[..., Tensor]:
    def fn(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        torch.manual_seed(seed)  # the mask's seed comes from the global generator
        return attention(q, k, v, dropout_p=0.3)

    return fn


def test_dropout_replays_from_the_random_state_and_its_derivatives_are_exact(chunks: str) -> None:
    q, k, v, dq, dk, dv = (t.requires_grad_(True) for t in _inputs((1, 2, 5, 3)))  # small: gradcheck is O(n²)
    state = torch.get_rng_state()
    first = attention(q, k, v, dropout_p=0.3)
    torch.set_rng_state(state)
    assert torch.equal(
        first, attention(q, k, v, dropout_p=0.3)
    )  # `shared` masks: the same state, the same mask
    assert not torch.allclose(first, attention(q, k, v, dropout_p=0.3))  # the stream moved on: a new mask
    assert not torch.allclose(first, attention(q, k, v))
    fn = _with_dropout(5)
    assert torch.autograd.gradcheck(fn, (q, k, v))  # the backward regenerates the forward's mask

    def tangent(*tensors: Tensor) -> Tensor:
        return torch.func.jvp(fn, tensors[:3], tensors[3:])[1]

    assert torch.autograd.gradcheck(tangent, (q, k, v, dq, dk, dv))
    h = 1e-6
    with torch.no_grad():
        difference = (fn(q + h * dq, k + h * dk, v + h * dv) - fn(q - h * dq, k - h * dk, v - h * dv)) / (
            2 * h
        )
        torch.testing.assert_close(tangent(q, k, v, dq, dk, dv), difference, rtol=1e-6, atol=1e-8)


def _saved_score_shapes(fn: Callable[..., Tensor], t: int) -> list[torch.Size]:
    """Shapes ending in (t, t) among the tensors a JVP pass saves for its backward."""
    q, k, v, dq, dk, dv = (torch.randn(1, 2, t, 4, requires_grad=True) for _ in range(6))
    shapes: list[torch.Size] = []

    def pack(x: Tensor) -> Tensor:
        if x.dim() >= 2 and tuple(x.shape[-2:]) == (t, t):
            shapes.append(x.shape)
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x), sdpa_kernel([SDPBackend.MATH]):
        out, tangent = torch.func.jvp(fn, (q, k, v), (dq, dk, dv))
    ((tangent**2).sum() + out.sum()).backward()
    return shapes


def test_a_jvp_pass_keeps_no_score_sized_tensor() -> None:
    assert _saved_score_shapes(F.scaled_dot_product_attention, 16)  # the math backend keeps them
    assert _saved_score_shapes(lambda q, k, v: attention(q, k, v, dropout_p=0.1), 16) == []


def test_the_mode_replaces_sdpa_and_nothing_else() -> None:
    q, k, v = (t.float() for t in _inputs()[:3])
    with LightAttention():
        ours = F.scaled_dot_product_attention(q, k, v)
        assert torch.equal(F.softmax(q, -1), torch.softmax(q, -1))
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize("chunks", ["whole", "one-row"])
def test_an_ascent_through_the_tangent_differentiates_the_tangents_alone(
    chunks: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ascent's VJP (weights frozen, x detached) needs only the tangents' gradients: q, k and v get none
    and no work is spent on them, and the tangents' gradients are those of the full backward."""
    if chunks == "one-row":
        monkeypatch.setattr(attention_module, "CHUNK_ELEMENTS", 1)
    gen = torch.Generator().manual_seed(3)
    q, k, v, dq, dk, dv = (torch.randn(2, 3, 5, 4, dtype=torch.float64, generator=gen) for _ in range(6))

    counter = pytest.importorskip("bench.flops").DtypeFlops

    def tangent_grads(primal_grad: bool) -> tuple[list[Tensor | None], list[Tensor], int]:
        primal = [t.clone().requires_grad_(primal_grad) for t in (q, k, v)]
        tangents = [t.clone().requires_grad_(True) for t in (dq, dk, dv)]
        _, out = torch.func.jvp(attention, tuple(primal), tuple(tangents))
        flops = counter()
        with flops:
            grads = torch.autograd.grad((out**2).sum(), [*tangents, *(primal if primal_grad else [])])
        return [t.grad for t in primal], list(grads[:3]), flops.total()

    primal, alone, alone_flops = tangent_grads(primal_grad=False)
    assert primal == [None, None, None]
    _, full, full_flops = tangent_grads(primal_grad=True)
    for a, b in zip(alone, full, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert alone_flops < full_flops


def test_an_accelerator_takes_larger_query_chunks() -> None:
    """A GPU step is launch-bound: BERT's 12 heads at batch 32 x 512 tokens run in 7 chunks a call there, 25 on
    CPU (where the budget bounds a chunk's memory)."""
    for device, expected in (("cpu", 25), ("meta", 7)):  # meta: any device that is not the CPU
        q = torch.empty(32, 12, 512, 64, device=device)
        chunks = attention_module._query_chunks(q, q)
        assert len(chunks) == expected and chunks[0].start == 0 and chunks[-1].stop == 512


def test_a_mask_that_alone_requires_grad_gets_none() -> None:
    """Only an additive mask requires grad: the backward runs, and the mask gets no gradient (as before the
    recomputation: attention's mask is an input, not a parameter)."""
    q, k, v = (torch.randn(1, 2, 4, 8) for _ in range(3))
    mask = torch.zeros(1, 1, 4, 4, requires_grad=True)
    attention(q, k, v, attn_mask=mask).sum().backward()
    assert mask.grad is None


@pytest.mark.parametrize("batch", [(B, H), (B * H,)], ids=["4-d", "3-d"])
def test_dropout_zeroes_probabilities_and_scales_the_rest_by_one_over_the_keep_rate(
    batch: tuple[int, ...], chunks: str
) -> None:
    """With v the identity, the output is the dropped attention matrix: each entry is 0 or P / (1 − p), about p
    of them 0, whatever the inputs' batch dimensions (inverted dropout, as SDPA's)."""
    gen = torch.Generator().manual_seed(7)
    q, k = (torch.randn(*batch, T, D, dtype=torch.float64, generator=gen) for _ in range(2))
    identity = torch.eye(T, dtype=torch.float64).expand(*batch, T, T)
    rate = 0.3
    torch.manual_seed(3)
    dropped = attention(q, k, identity, dropout_p=rate)
    kept = dropped != 0
    probabilities = attention(q, k, identity)
    torch.testing.assert_close(dropped[kept], probabilities[kept] / (1 - rate))
    assert abs((~kept).double().mean().item() - rate) < 0.1  # 392 entries


def test_no_random_numbers_and_no_join_where_none_is_needed() -> None:
    """Without dropout a call draws nothing (and so costs no launch for a mask); in one query chunk it joins no
    chunks (a `cat` of one part is a copy)."""
    q, k, v = _inputs()[:3]
    count = OpCount(torch.ops.aten.rand, torch.ops.aten.cat, torch.ops.aten.bernoulli_)
    with count:
        attention(q, k, v)
    assert count.count == 0


def test_the_probabilities_are_fp32_at_least_from_bf16_inputs() -> None:
    """The softmax is taken at fp32 from bf16 q and k: exactly the fp64 softmax of the bf16 scores, to fp32's
    precision (a bf16 softmax is off by ~1e-3). The scores themselves are the bf16 matmul's, rounded."""
    q, k = (t.bfloat16() for t in _inputs()[:2])
    probabilities = attention_module._probabilities(q, k, None, 1 / D**0.5)
    expected = torch.softmax((q @ k.transpose(-2, -1)).double() / D**0.5, dim=-1)
    assert probabilities.dtype == torch.float32
    torch.testing.assert_close(probabilities.double(), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dual", [True, False])
def test_a_tangent_on_the_queries_alone(dual: bool, chunks: str) -> None:
    """Keys and values without a tangent (constants of the JVP, on dual tensors or under functorch): the tangent
    is SDPA's, the keys' and values' taken as zero."""
    q, k, v, dq = _inputs()[:4]
    if dual:
        with fwAD.dual_level():
            ours = fwAD.unpack_dual(attention(fwAD.make_dual(q, dq), k, v))
    else:
        ours = torch.func.jvp(lambda a: attention(a, k, v), (q,), (dq,))
    with sdpa_kernel([SDPBackend.MATH]):
        reference = torch.func.jvp(lambda a: F.scaled_dot_product_attention(a, k, v), (q,), (dq,))
    for a, b in zip(ours, reference, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
