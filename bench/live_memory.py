"""Peak tensor memory of a training step, counted by storage: a step's GPU memory, measured without a GPU.

`torch.cuda.max_memory_allocated` is the bytes of live tensor storages at their peak. The same count on CPU
comes from watching every storage an aten op allocates while the step runs (a `TorchDispatchMode`) and dropping
it when Python frees it (a weak reference to the storage): saved activations, the graphs a step keeps,
autocast's weight copies, gradients, the optimizer's state, transients. What it leaves out is what the CUDA
caching allocator adds (rounding to 512 B blocks, fragmentation, cuBLAS workspaces) and what differs by kernel
(`no_attention_dropout`). Counted from the moment the mode starts: the weights and anything allocated before
are the baseline, as research.memory reads `max_memory_allocated() - memory_allocated()` on a GPU.

Checked against the H200 (research/results/memory_h200.json, MiniLM-L6, batch 32 x 128, bf16): vanilla 636.9
MiB counted against 640.7 measured, smart-breg-only 747.7 against 739.6 (`python -m bench.live_memory
--model minilm-l6 --batch-sizes 32 --seq-len 128 --methods vanilla,smart-breg-only`).
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import sys
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from bench.padding import Batch, fixed_batch
from bench.stepper import Stepper, load_model

MiB = 2**20
MEMORY_STEPS = 3  # as research.memory: the first update allocates AdamW's moments


def _dense(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.layout == torch.strided


class PeakLiveBytes(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Bytes of the storages allocated while active and not yet freed: `live` now, `peak` at most, and the
    peak reached while each `phase` ran (`peaks`, by the name given to `phase`; "" outside any)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.live = 0
        self.peak = 0
        self.peaks: dict[str, int] = {}
        self._phase = ""
        self._tracked: dict[int, weakref.ref[torch.UntypedStorage]] = {}  # id(storage) -> its weak reference

    def _freed(self, key: int, nbytes: int) -> None:
        if self._tracked.pop(key, None) is not None:
            self.live -= nbytes

    def _on_free(self, key: int, nbytes: int, _ref: object) -> None:  # the weak reference's callback
        self._freed(key, nbytes)

    def _track(self, storage: torch.UntypedStorage) -> None:
        key = id(storage)  # a storage keeps its Python object while it lives, so the id is stable
        if key in self._tracked or storage.device.type == "meta":
            return
        nbytes = storage.nbytes()
        self._tracked[key] = weakref.ref(storage, functools.partial(self._on_free, key, nbytes))
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        self.peaks[self._phase] = max(self.peaks.get(self._phase, 0), self.live)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Attribute the peak reached inside to `name`."""
        outer, self._phase = self._phase, name
        try:
            yield
        finally:
            self._phase = outer

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {id(t.untyped_storage()) for t in tree_leaves((args, kwargs)) if _dense(t)}
        for leaf in tree_leaves(out):
            # a view or an in-place result lives in an input's storage: no allocation (the optimizer's
            # in-place update of the weights would otherwise count them)
            if _dense(leaf) and id(leaf.untyped_storage()) not in inputs:
                self._track(leaf.untyped_storage())
        return out


@contextmanager
def peak_live_bytes() -> Iterator[PeakLiveBytes]:
    """`with peak_live_bytes() as counter: ...`, then `counter.peak` (bytes)."""
    counter = PeakLiveBytes()
    with counter:
        yield counter


def no_attention_dropout(model: nn.Module) -> nn.Module:
    """`model` with its attention-probability dropout off (p = 0), for the count only.

    CUDA's fused attention kernels apply dropout inside the kernel and regenerate its mask from the RNG state
    in the backward, so they keep O(B·heads·T) per layer with dropout on. The CPU's fused kernel has no dropout:
    with it on, SDPA takes its math path and keeps the (B, heads, T, T) probabilities and masks. With p = 0 the
    CPU takes its flash kernel, which keeps what CUDA's keep. Hidden-state dropout is untouched (its masks are
    kept on both devices)."""
    for module in model.modules():
        dropout = getattr(module, "dropout", None)
        if type(module).__name__.endswith("SelfAttention") and isinstance(dropout, nn.Dropout):
            dropout.p = 0.0
    return model


def method_peaks(
    model: nn.Module, method: str, batch: Batch, labels: Tensor, *, steps: int = MEMORY_STEPS
) -> dict[str, int]:
    """Peak bytes of `steps` bf16-autocast updates of `method` (a bench.stepper variant) on a copy of `model`,
    counted as research.memory reads a GPU: from before the method's optimizer and objective exist, each update
    wholly under autocast. `model` is left as it was. Keys: `peak` over everything, `update` while AdamW
    updates the weights (its moments and temporaries: fixed in the batch size), `pass` the rest (the method's
    forwards and backward: grows with it)."""
    student = no_attention_dropout(copy.deepcopy(model))
    with peak_live_bytes() as counter, torch.autocast("cpu", dtype=torch.bfloat16):
        stepper = Stepper(student, method, torch.device("cpu"))
        update = stepper.optimizer.step

        def counted_update(*args: Any, **kwargs: Any) -> Any:
            with counter.phase("update"):
                return update(*args, **kwargs)

        stepper.optimizer.step = counted_update  # type: ignore[method-assign]
        for _ in range(steps):
            stepper.step(batch, labels)
    return {"peak": counter.peak, "update": counter.peaks.get("update", 0), "pass": counter.peaks.get("", 0)}


def random_bert_base() -> tuple[nn.Module, Any]:
    """BERT-base's shape with random weights (bert-base-uncased's config, vocabulary 30,522) and MiniLM's
    tokenizer (the same uncased word pieces): the paper's model, offline."""
    from transformers import AutoModelForSequenceClassification, BertConfig

    _, tokenizer = load_model("minilm-l6")
    torch.manual_seed(0)
    config = BertConfig()
    config.num_labels = 2
    return AutoModelForSequenceClassification.from_config(config), tokenizer  # type: ignore[no-untyped-call]


def measure(
    model_name: str, methods: list[str], batch_sizes: list[int], seq_len: int, steps: int = MEMORY_STEPS
) -> dict[str, Any]:
    """Per method and batch size the counted peaks (MiB); with two or more batch sizes, the line through the
    passes' peaks (`fixed_mib` + `per_example_mib` x B: activations grow with B, the weights' state does not)
    and the update's peak (`update_mib`, the largest seen), so that the peak at B is the larger of the two."""
    model, tokenizer = random_bert_base() if model_name == "bert-base" else load_model(model_name)
    rows: dict[str, Any] = {}
    for method in methods:
        peaks: dict[int, dict[str, float]] = {}
        for size in batch_sizes:
            batch, labels, _ = fixed_batch(tokenizer, size, seq_len)
            counted = method_peaks(model, method, batch, labels, steps=steps)
            peaks[size] = {k: v / MiB for k, v in counted.items()}
            print(f"[live_memory] {model_name} {method} b{size} s{seq_len}: {peaks[size]['peak']:.1f} MiB "
                  f"(pass {peaks[size]['pass']:.1f}, update {peaks[size]['update']:.1f})", file=sys.stderr)  # fmt: skip
        row: dict[str, Any] = {"peak_mib": {str(b): p for b, p in peaks.items()}}
        if len(peaks) >= 2:
            (b0, p0), (b1, p1) = [(b, peaks[b]["pass"]) for b in (min(peaks), max(peaks))]
            slope = (p1 - p0) / (b1 - b0)
            row |= {"per_example_mib": slope, "fixed_mib": p0 - slope * b0,
                    "update_mib": max(p["update"] for p in peaks.values())}  # fmt: skip
        rows[method] = row
    return {"model": model_name, "seq_len": seq_len, "batch_sizes": batch_sizes, "steps": steps, "methods": rows,
            "params": sum(p.numel() for p in model.parameters()), "torch": torch.__version__,
            "note": __doc__}  # fmt: skip


def at_batch(result: dict[str, Any], batch_size: int) -> dict[str, dict[str, float]]:
    """Each method's peak at `batch_size` on the fitted line, and its ratio to vanilla's."""
    rows = result["methods"]
    mib = {
        m: max(r["fixed_mib"] + r["per_example_mib"] * batch_size, r["update_mib"])
        for m, r in rows.items()
        if "fixed_mib" in r
    }
    base = mib.get("vanilla")
    return {m: {"peak_mib": v, "ratio": v / base if base else float("nan")} for m, v in mib.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.live_memory", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="minilm-l6", help="a model name, or bert-base (random weights)")
    parser.add_argument("--methods", default="vanilla,smart,smart+rs_arithmetic=auto+rs_dropout=shared")
    parser.add_argument("--batch-sizes", default="1,2", help="counted; a line through them extrapolates")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--at", type=int, default=32, help="the batch size to extrapolate to")
    parser.add_argument(
        "--steps",
        type=int,
        default=MEMORY_STEPS,
        help="updates per count (>= 2: the first allocates AdamW's moments, the second runs beside them)",
    )
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if args.steps < 2:
        parser.error("--steps must be >= 2: the first update allocates AdamW's moments")
    result = measure(
        args.model, methods, [int(b) for b in args.batch_sizes.split(",")], args.seq_len, args.steps
    )
    if len(result["batch_sizes"]) >= 2:
        result["at"] = {"batch_size": args.at, "methods": at_batch(result, args.at)}
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
