"""Matmul FLOPs of one training step by the dtype they run at: tensor-core use, checked without a GPU.

Under bf16 autocast a CPU step dispatches the same aten matmuls in the same dtypes as a CUDA step (autocast's
op lists are shared), so the share of a step's matmul FLOPs at bf16 says how much of it could run on tensor
cores; an fp32 step (SMART's exact path, smart_core.precision) has none. Counted: every op torch's own
FLOP counter has a formula for (mm, addmm, bmm, baddbmm, convolutions, the fused attention kernels, forward
and backward), plus the CPU flash-attention kernels, by the dtype of the op's first output (a matmul's
operands, autocast-cast). Elementwise work is not counted: it is memory-bound and the same at any precision.

The same pass counts the step's kernel launches (`launches`: every aten op but views, detaches and scalar
reads): a GPU step at small batch is launch-bound, and there its time follows this count times the host's cost
per op (an H200 at MiniLM x 128 paid 11-23 µs per op), whatever its FLOPs. Under the counter smart_core.fused's
helpers run eager; `helper_launches` are the launches inside them and `helper_calls` the calls, so
`launches - helper_launches + helper_calls` is the count with each helper one compiled region (a GPU runs a
region as one to a few kernels).
"""

from __future__ import annotations

import copy
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from bench import sync
from bench.stepper import Stepper
from smart_core import fused

aten = torch.ops.aten
FORMULAS: dict[Any, Callable[..., int]] = {
    **flop_registry,
    # The CPU kernels take query, key, value first, as the CUDA flash kernels whose formulas they borrow.
    aten._scaled_dot_product_flash_attention_for_cpu: flop_registry[aten._scaled_dot_product_flash_attention],
    aten._scaled_dot_product_flash_attention_for_cpu_backward: flop_registry[
        aten._scaled_dot_product_flash_attention_backward
    ],
}


# metadata, allocation without fill, forward AD's layout checks: no kernel, like views
NO_KERNEL = {aten.detach, aten.lift_fresh, aten.alias, aten._unsafe_view, aten.is_same_size,
             aten._has_same_storage_numel, aten.promote_types, aten._efficientzerotensor, aten.empty_like,
             aten.empty, aten.empty_strided}  # fmt: skip


class DtypeFlops(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts matmul FLOPs by dtype while active (the backward included, when it runs inside)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.flops: dict[torch.dtype, int] = defaultdict(int)
        self.launches = 0  # aten ops that run a kernel (module docstring)
        self.syncs = 0  # scalar reads: on a GPU each waits for the queue to drain
        self.helper_launches = 0  # of `launches`, those inside smart_core.fused's helpers (module docstring)
        self.helper_calls = 0  # the helpers' calls while counting

    def __enter__(self) -> DtypeFlops:
        self._calls_before = fused.helper_calls()
        return super().__enter__()  # type: ignore[no-any-return,no-untyped-call]

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)  # type: ignore[no-untyped-call]
        self.helper_calls += fused.helper_calls() - self._calls_before

    def regions(self) -> int:
        """`launches` with each helper call counted once: the step as a GPU runs it with the helpers compiled."""
        return self.launches - self.helper_launches + self.helper_calls

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func._overloadpacket is aten._local_scalar_dense:
            self.syncs += 1
        elif not func.is_view and func._overloadpacket not in NO_KERNEL:
            self.launches += 1
            self.helper_launches += fused.inside_helper()
        formula = FORMULAS.get(func._overloadpacket)
        if formula is not None:
            dtype = next(t.dtype for t in tree_leaves(out) if isinstance(t, torch.Tensor))
            self.flops[dtype] += int(formula(*args, **kwargs, out_val=out))
        return out

    def total(self) -> int:
        """Every counted FLOP, whatever its dtype."""
        return sum(self.flops.values())

    def share(self, dtype: torch.dtype) -> float:
        """The fraction of the counted FLOPs that ran at `dtype` (0 when nothing was counted)."""
        total = sum(self.flops.values())
        return self.flops.get(dtype, 0) / total if total else 0.0


def step_flops(loss: Callable[[], Tensor], device: torch.device) -> DtypeFlops:
    """The matmul FLOPs of a training step by dtype, its forward (`loss()`) under bf16 autocast on `device` and
    its backward after, outside autocast, as worker/training/loop.py runs them."""
    counter = DtypeFlops()
    with counter:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            value = loss()
        value.backward()  # type: ignore[no-untyped-call]
    return counter


def bf16_share(loss: Callable[[], Tensor], device: torch.device) -> float:
    """The share of `step_flops` that runs at bf16."""
    return step_flops(loss, device).share(torch.bfloat16)


def method_flops(
    model: nn.Module,
    method: str,
    batch: Mapping[str, Tensor],
    labels: Tensor,
    device: torch.device,
    *,
    updates_done: int = 0,
) -> DtypeFlops:
    """`step_flops` of one step of `method` (a bench.stepper variant) on a copy of `model`, which is left as
    it was; under its tag's settings (`@unfused`, `@wide`: Stepper.helpers), as the step it times runs.
    `updates_done`: the optimizer updates before the counted step, as the objective counts them. At 0 a SMART
    step also runs its diagnostics (R_s at δ = 0 and the ascent signal, every `diagnostics_every` updates);
    at 1 it is the step the other nine of ten are."""
    stepper = Stepper(copy.deepcopy(model), method, device)
    if stepper.objective is not None:
        stepper.objective.steps = updates_done
    with stepper.helpers():
        return step_flops(lambda: stepper.loss(dict(batch), labels), device)


def method_bf16_share(
    model: nn.Module, method: str, batch: Mapping[str, Tensor], labels: Tensor, device: torch.device
) -> float:
    """The share of `method_flops` that runs at bf16."""
    return method_flops(model, method, batch, labels, device).share(torch.bfloat16)


def matmul_rate(device: torch.device, dtype: torch.dtype, size: int | None = None, repeats: int = 5) -> float:
    """The device's measured matmul rate at `dtype` (FLOP/s): the best of `repeats` square matmuls of `size`
    (8192 on a GPU, 1024 on CPU), after one untimed. MFU's denominator: what this chip reaches at all, not its
    data sheet. fp32 at "highest" (no TF32), as SMART's exact step runs."""
    size = size or (8192 if device.type == "cuda" else 1024)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    matmul = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        best = float("inf")
        for i in range(repeats + 1):
            sync(device)
            start = time.perf_counter()
            torch.mm(a, b)
            sync(device)
            if i:
                best = min(best, time.perf_counter() - start)
    finally:
        torch.set_float32_matmul_precision(matmul)
    return 2.0 * size**3 / best
