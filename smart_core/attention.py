"""Attention with a forward-mode derivative that keeps no (B, heads, T, T) tensor between a pass and its backward.

A linearised step (smart_core.linearized) pushes a tangent through the model with a JVP. PyTorch's fused
attention kernels have no forward-mode derivative (pytorch/pytorch#117629, #128971), and SDPA's math backend,
which has one, keeps its scores, probabilities and their tangents for the backward: five or six
(B, heads, T, T) tensors per layer, twice the exact fp32 step's whole memory at 512 tokens
(`python -m bench.live_memory`). Here attention is a `torch.autograd.Function` whose forward and tangent keep
only q, k, v (and their tangents, B·heads·T·D each) and recompute the T × T part in the backward, one layer and
one chunk of queries at a time (`CHUNK_ELEMENTS`), as the fused kernels do:
    O  = dropout(P) V,                    P = softmax(q kᵀ·scale + mask)
    dO = dropout(dP) V + dropout(P) dV,   dP = P ⊙ (dS − Σ_j P dS),  dS = (dq kᵀ + q dkᵀ)·scale
The dropout masks come from a seed drawn from the global generator at the call, chunk after chunk, so a pass
replayed from the same random state (`shared` dropout: smart_core.dropout) draws the same masks, and the
backward, which walks the same chunks, regenerates them. Arithmetic: scores at q's dtype, softmax in fp32, the products with V at V's dtype, autocast or not (the
backward, which may run outside autocast, recomputes exactly what the forward computed).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from smart_core import fused
from smart_core.substitution import Substituting

Mask = Tensor | None  # bool (True: attend) or additive float, broadcastable to (B, heads, Tq, Tk)


class _Masks:
    """The dropout keep-masks of one call, chunk after chunk: (B, heads, rows, Tk) bool each, drawn in order from
    a generator seeded with the call's seed, so the backward, which walks the same chunks, draws the same ones.
    None without dropout."""

    def __init__(self, q: Tensor, k: Tensor, seed: int, rate: float) -> None:
        self.shape, self.rate = (*q.shape[:-2], k.shape[-2]), rate
        self.generator = torch.Generator(device=q.device).manual_seed(seed) if rate > 0.0 else None

    def next(self, rows: slice) -> Tensor | None:
        if self.generator is None:
            return None
        shape = (*self.shape[:-1], rows.stop - rows.start, self.shape[-1])
        return torch.rand(shape, generator=self.generator, device=self.generator.device) >= self.rate


def _wide(t: Tensor) -> Tensor:
    """fp32 at least (fp64 stays fp64)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def _probabilities(q: Tensor, k: Tensor, mask: Mask, scale: float) -> Tensor:
    """P = softmax(q kᵀ·scale + mask) (B, heads, Tq, Tk), fp32 at least; a row with every key masked is 0,
    as in SDPA's math backend."""
    scores = _wide(q @ k.transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
    return torch.ops.aten._safe_softmax(scores, -1)  # type: ignore[no-any-return]


def _dropped(p: Tensor, keep: Tensor | None, rate: float) -> Tensor:
    return p if keep is None else p * keep / (1.0 - rate)


def _output(
    q: Tensor, k: Tensor, v: Tensor, mask: Mask, keep: Tensor | None, rate: float, scale: float
) -> Tensor:
    with torch.autocast(q.device.type, enabled=False):
        p = _probabilities(q, k.to(q.dtype), mask, scale)
        return _dropped(p, keep, rate).to(v.dtype) @ v


def _tangent(
    q: Tensor, k: Tensor, v: Tensor, dq: Tensor, dk: Tensor, dv: Tensor,
    mask: Mask, keep: Tensor | None, rate: float, scale: float,
) -> Tensor:  # fmt: skip
    """dO (B, heads, Tq, D) at V's dtype: the derivative of `_output` along (dq, dk, dv)."""
    with torch.autocast(q.device.type, enabled=False):
        k, dq, dk = k.to(q.dtype), dq.to(q.dtype), dk.to(q.dtype)
        p = _probabilities(q, k, mask, scale)
        ds = _wide(dq @ k.transpose(-2, -1) + q @ dk.transpose(-2, -1)) * scale
        dp = p * (ds - (p * ds).sum(dim=-1, keepdim=True))
        out = _dropped(dp, keep, rate).to(v.dtype) @ v
        return out + _dropped(p, keep, rate).to(v.dtype) @ dv.to(v.dtype)


# Score entries per query chunk: a chunk's recomputed graph holds about eight (B, heads, chunk, Tk) fp32
# tensors, 16 MiB each on CPU whatever B and the heads. On a GPU each chunk costs ~80 kernel launches per layer
# and pass, and the step is launch-bound (an H200 took 1.9 s a step at MiniLM-L6 x 512, batch 32, with 25
# chunks a call), so chunks are 4x larger there: 64 MiB a tensor, 7 chunks at that shape, and the step's peak
# does not move (bench.live_memory: the peak is the final pass's graph, not a chunk's recomputation).
CHUNK_ELEMENTS = 2**22
ACCELERATOR_CHUNK_ELEMENTS = 2**24
ROW_INPUTS = (0, 3)  # q and dq have a row per query; k, v, dk, dv a row per key
Evaluated = Callable[..., Tensor]  # fn(*tensors, mask, keep, rate, scale) -> (B, heads, chunk, D)


def _query_chunks(q: Tensor, k: Tensor) -> list[slice]:
    """Query rows in chunks of at most CHUNK_ELEMENTS score entries (B·heads·Tk per row; on an accelerator
    ACCELERATOR_CHUNK_ELEMENTS)."""
    per_row = max(1, q[..., 0, 0].numel() * k.shape[-2])
    budget = CHUNK_ELEMENTS if q.device.type == "cpu" else ACCELERATOR_CHUNK_ELEMENTS
    size, rows = max(1, budget // per_row), q.shape[-2]
    return [slice(start, min(start + size, rows)) for start in range(0, rows, size)]


def _rows(t: Tensor | None, rows: slice, queries: int) -> Tensor | None:
    """`t`'s rows for these queries; a mask broadcast along the queries (size 1 there) is whole for each."""
    if t is None or t.dim() < 2 or t.shape[-2] != queries:
        return t
    return t[..., rows, :]


def _joined(parts: list[Tensor]) -> Tensor:
    """The chunks' rows in order (one chunk, the usual case on a GPU, as it is: no copy)."""
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-2)


def _evaluate(fn: Evaluated, tensors: Sequence[Tensor], mask: Mask, masks: _Masks, scale: float) -> Tensor:
    """`fn(*tensors, mask, keep, rate, scale)` over query chunks, without graph: one chunk's scores alive at a
    time; compiled on a GPU (smart_core.fused)."""
    queries = tensors[0].shape[-2]
    parts = []
    run = fused.function(fn)
    for rows in _query_chunks(tensors[0], tensors[1]):
        chunk = [t[..., rows, :] if i in ROW_INPUTS else t for i, t in enumerate(tensors)]
        parts.append(run(*chunk, _rows(mask, rows, queries), masks.next(rows), masks.rate, scale))
    return _joined(parts)


def _recomputed_grads(
    fn: Evaluated,
    tensors: Sequence[Tensor],
    mask: Mask,
    masks: _Masks,
    scale: float,
    grad: Tensor,
    needed: Sequence[bool],
) -> list[Tensor | None]:
    """The gradient of ⟨fn(*tensors, mask, keep, rate, scale), grad⟩ with respect to each tensor that `needed`
    names (None for the others: an ascent through the tangent needs the tangents' alone), recomputing `fn`
    chunk by chunk so that one chunk's graph is alive at a time; compiled on a GPU (smart_core.fused)."""
    queries = tensors[0].shape[-2]
    wanted = [i for i, n in enumerate(needed) if n]
    if not wanted:  # only the mask needed a gradient (an additive one that requires grad): it gets none
        return [None] * len(tensors)
    whole: dict[int, Tensor] = {}  # k, v and their tangents: summed over the chunks (one chunk: no sum)
    rows_of: dict[int, list[Tensor]] = {i: [] for i in wanted if i in ROW_INPUTS}
    gradients = fused.vjp(fn, needed)
    for rows in _query_chunks(tensors[0], tensors[1]):
        chunk = [t[..., rows, :] if i in ROW_INPUTS else t for i, t in enumerate(tensors)]
        keep = masks.next(rows)
        grads = gradients(*chunk, _rows(mask, rows, queries), keep, masks.rate, scale, grad[..., rows, :])
        for i, g in zip(wanted, grads, strict=True):
            if i in rows_of:
                rows_of[i].append(g)
            else:
                whole[i] = g if i not in whole else whole[i] + g
    return [_joined(rows_of[i]) if i in rows_of else whole.get(i) for i in range(len(tensors))]


class _Attention(torch.autograd.Function):
    """O from (q, k, v); keeps q, k, v; its JVP is `_AttentionTangent`."""

    @staticmethod
    def forward(q: Tensor, k: Tensor, v: Tensor, mask: Mask, seed: int, rate: float, scale: float) -> Tensor:
        return _evaluate(_output, (q, k, v), mask, _Masks(q, k, seed, rate), scale)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        q, k, v, mask, seed, rate, scale = inputs
        ctx.save_for_backward(q, k, v, mask)
        ctx.save_for_forward(q, k, v, mask)
        ctx.seed, ctx.rate, ctx.scale = seed, rate, scale

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, mask = ctx.saved_tensors
        masks = _Masks(q, k, ctx.seed, ctx.rate)
        grads = _recomputed_grads(_output, (q, k, v), mask, masks, ctx.scale, grad, ctx.needs_input_grad[:3])
        return (*grads, None, None, None, None)

    @staticmethod
    def jvp(ctx: Any, dq: Tensor, dk: Tensor, dv: Tensor, *_: Any) -> Tensor:
        # grads are materialised (the default): an input without a tangent comes as zeros, never None
        q, k, v, mask = ctx.saved_tensors
        out: Tensor = _AttentionTangent.apply(q, k, v, dq, dk, dv, mask, ctx.seed, ctx.rate, ctx.scale)  # type: ignore[no-untyped-call]
        return out


class _AttentionTangent(torch.autograd.Function):
    """dO from (q, k, v) and their tangents; keeps those six and recomputes P and dS in the backward."""

    @staticmethod
    def forward(
        q: Tensor, k: Tensor, v: Tensor, dq: Tensor, dk: Tensor, dv: Tensor,
        mask: Mask, seed: int, rate: float, scale: float,
    ) -> Tensor:  # fmt: skip
        return _evaluate(_tangent, (q, k, v, dq, dk, dv), mask, _Masks(q, k, seed, rate), scale)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        *tensors, mask, seed, rate, scale = inputs
        ctx.save_for_backward(*tensors, mask)
        ctx.seed, ctx.rate, ctx.scale = seed, rate, scale

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        *tensors, mask = ctx.saved_tensors
        masks = _Masks(tensors[0], tensors[1], ctx.seed, ctx.rate)
        grads = _recomputed_grads(_tangent, tensors, mask, masks, ctx.scale, grad, ctx.needs_input_grad[:6])
        return (*grads, None, None, None, None)


def attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Mask = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """`F.scaled_dot_product_attention`'s contract, computed as the module docstring says."""
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        groups = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(groups, dim=-3), value.repeat_interleave(groups, dim=-3)
    mask = attn_mask
    if is_causal:  # aligned at the top left, as SDPA's: query i sees keys 0..i, whatever the key count
        causal = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool, device=query.device).tril()
        if mask is None:
            mask = causal
        elif mask.dtype == torch.bool:  # with a mask too (SDPA's fused CPU kernel takes both): both apply
            mask = mask & causal
        else:
            mask = mask.masked_fill(~causal, -math.inf)
    seed = (
        int(torch.randint(0, 2**62, (1,)).item()) if dropout_p > 0.0 else 0
    )  # CPU generator: no device sync
    factor = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    out: Tensor = _Attention.apply(query, key, value, mask, seed, float(dropout_p), factor)  # type: ignore[no-untyped-call]
    return out


class LightAttention(Substituting):
    """Runs `F.scaled_dot_product_attention` as `attention` while active."""

    replacements = {F.scaled_dot_product_attention: attention}
