"""A step's kernel launches as a GPU would issue them, counted on CPU: eager, and with smart_core.fused's helpers
compiled (issue 28).

    python -m research.launch_count [--model minilm-l6] [--batch-size 32] [--seq-len 128]
        [--methods vanilla,smart,smart+rs_arithmetic=auto+rs_dropout=shared,smart-breg-only] [--out FILE]
        [--count-batch-size 4]

bench.flops counts the aten ops of one step's loss (bf16 autocast) and backward that run a kernel. Attention is
chunked as on an accelerator (`ACCELERATOR_CHUNK_ELEMENTS`: the count a GPU would see, not the CPU's smaller
chunks). `launches` is the eager step; `fused_launches` the same step with each helper call one region
(`fusing("on")`: the passes as `auto` builds them on a GPU), a lower bound of its kernels (a compiled region
is one to a few). An H200's step time followed the eager count (about 40 µs a launch, every method, MiniLM-L6
x 128: bench/results/step_gpu.json), so this is the CPU's forecast of the GPU's time ratio where it is
launch-bound. No timing: the counts are exact and the same on any machine with this torch.

Each method is counted at two steps: the step nine of ten are (`launches`, `fused_launches`: what the median of
bench.step's timed steps sees) and the step that also runs SMART's diagnostics (`diagnostics_*`: R_s at δ = 0
and, for an exact ascent, the ascent signal, every `diagnostics_every` updates), with the mean over that period
(`mean_fused_launches`: a run's average step). Until stop 50 only the diagnostics step was counted: at
MiniLM-L6 x 128 it had 3,007 launches for the exact step, where the steady step has 1,713.

A step's launches depend on its batch only through attention's query chunks (`B·heads·Tk` score entries a
row), so `--count-batch-size N` counts at N rows with the chunk budget scaled by N / `--batch-size`: the queries
chunk as they would at `--batch-size`, the count is the same, and a 512-token batch of 32 fits in this
machine's memory (checked against the batch-32 count at 128 tokens: research/results/launch_count_*.json).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

import smart_core.attention as attention
from bench.flops import method_flops
from bench.live_memory import random_bert_base
from bench.padding import Batch, fixed_batch
from bench.stepper import PEER, load_model, parse_variant
from smart_core import fused

METHODS = "vanilla,smart,smart+rs_arithmetic=auto+rs_dropout=shared,smart-breg-only"


def chunk_budget(batch_size: int, count_batch_size: int, elements: int = 0) -> int:
    """The accelerator's chunk budget (`elements`, 0: smart_core.attention's) for a count at `count_batch_size`
    rows that chunks the queries as a `batch_size` batch does (the budget divided exactly: the chunk's row
    count is the same)."""
    elements = elements or attention.ACCELERATOR_CHUNK_ELEMENTS
    if count_batch_size < 1 or batch_size % count_batch_size:
        raise ValueError(f"--count-batch-size must divide --batch-size {batch_size}, got {count_batch_size}")
    if count_batch_size == 1 < batch_size:  # a batch dimension of 1 broadcasts: its gradients reduce and
        # accumulate with other ops (41 more add_ and 10 fewer clone at the tiny BERT)
        raise ValueError("--count-batch-size must be at least 2: a batch of one launches other ops")
    scale = batch_size // count_batch_size
    if elements % scale:
        raise ValueError(f"--batch-size / --count-batch-size ({scale}) must divide the chunk budget "
                         f"{elements} (use a power of 2)")  # fmt: skip
    return elements // scale


def counted_rows(batch: Batch, labels: Tensor, source: str, rows: int) -> tuple[Batch, Tensor, str]:
    """`rows` rows of the full batch that keep its padding: the first rows - 1 and its last (the most padded)
    row. A padded row changes the count (the attention mask's ops), so the counted rows keep one when the
    batch has one."""
    size = labels.shape[0]
    if rows >= size:
        return batch, labels, source
    keep = torch.tensor([*range(rows - 1), size - 1])
    return ({name: t[keep] for name, t in batch.items()}, labels[keep],
            f"{source}; counted on {rows} of its rows, its last (most padded) among them")  # fmt: skip


def method_row(model: torch.nn.Module, method: str, batch: Batch, labels: Tensor) -> dict[str, Any]:
    """One method's counts: the step nine of ten are (`launches`, `fused_launches`, `helper_calls`), the step
    that also runs SMART's diagnostics (`diagnostics_*`, every `diagnostics_every` updates) and their mean over
    that period (`mean_fused_launches`: what a run's average step issues)."""
    cpu = torch.device("cpu")
    counts: dict[str, int] = {}
    for updates_done, prefix in ((1, ""), (0, "diagnostics_")):  # diagnostics at updates 0, N, 2N, ...
        eager = method_flops(model.train(), method, batch, labels, cpu, updates_done=updates_done)
        with fused.fusing("on"):  # counted eager all the same (bench.flops); each helper call one region
            regions = method_flops(model.train(), method, batch, labels, cpu, updates_done=updates_done)
        counts |= {f"{prefix}launches": eager.launches, f"{prefix}fused_launches": regions.regions(),
                   f"{prefix}helper_calls": regions.helper_calls}  # fmt: skip
    every = diagnostics_period(method)
    extra = (counts["diagnostics_fused_launches"] - counts["fused_launches"]) / every if every else 0.0
    row = {**counts, "diagnostics_every": every, "mean_fused_launches": counts["fused_launches"] + extra}
    print(f"[launch_count] {method}: {row}", file=sys.stderr, flush=True)
    return row


def diagnostics_period(method: str) -> int:
    """How often `method`'s step runs its diagnostics (0: never, as for a method without R_s)."""
    if method.partition("@")[0] == PEER:
        return 0
    config = parse_variant(method)
    return config.diagnostics_every if config.uses_smoothness else 0


def count(args: argparse.Namespace) -> dict[str, Any]:
    rows_counted = args.count_batch_size or args.batch_size
    elements = args.chunk_elements or attention.ACCELERATOR_CHUNK_ELEMENTS
    budget = chunk_budget(args.batch_size, rows_counted, elements)
    model, tokenizer = random_bert_base() if args.model == "bert-base" else load_model(args.model)
    batch, labels, source = counted_rows(*fixed_batch(tokenizer, args.batch_size, args.seq_len), rows_counted)
    methods = [m for m in args.methods.split(",") if m]
    if not methods or methods[0] != "vanilla":
        raise ValueError("--methods must start with vanilla: every ratio is relative to it")
    cpu_chunks = attention.CHUNK_ELEMENTS
    attention.CHUNK_ELEMENTS = budget  # as a GPU chunks a --batch-size batch's queries
    try:
        rows = {method: method_row(model, method, batch, labels) for method in methods}
    finally:
        attention.CHUNK_ELEMENTS = cpu_chunks
    base = rows["vanilla"]
    for row in rows.values():
        for field in ("launches", "fused_launches", "diagnostics_fused_launches", "mean_fused_launches"):
            row[field.replace("launches", "launch_ratio")] = row[field] / base[field]
    setup = {"model": args.model, "batch_size": args.batch_size, "counted_batch_size": rows_counted,
             "seq_len": args.seq_len, "batch_source": source, "chunk_elements": elements,
             "counted_chunk_elements": budget, "torch": torch.__version__,
             "counted": "loss under bf16 autocast + backward (bench.flops), no optimizer"}  # fmt: skip
    return {"setup": setup, "methods": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.launch_count", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--model", default="minilm-l6", help="a model name, or bert-base (random weights)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--methods", default=METHODS)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--chunk-elements",
        type=int,
        default=0,
        help="attention's query-chunk budget on the GPU, in score entries (0: smart_core's)",
    )
    parser.add_argument(
        "--count-batch-size",
        type=int,
        default=0,
        help="count at this many rows, chunked as --batch-size is (0: --batch-size)",
    )
    args = parser.parse_args(argv)
    result = count(args)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    for method, row in result["methods"].items():
        print(f"{method:<50} launches {row['launches']:6d} x{row['launch_ratio']:.2f}   "
              f"fused {row['fused_launches']:6d} x{row['fused_launch_ratio']:.2f}   "
              f"with diagnostics {row['diagnostics_fused_launches']:6d}   "
              f"mean {row['mean_fused_launches']:8.1f} x{row['mean_fused_launch_ratio']:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
