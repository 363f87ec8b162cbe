"""A step's kernel launches as a GPU would issue them, counted on CPU: eager, and with smart_core.fused's helpers
compiled (issue 28).

    python -m research.launch_count [--model minilm-l6] [--batch-size 32] [--seq-len 128]
        [--methods vanilla,smart,smart+rs_arithmetic=auto+rs_dropout=shared,smart-breg-only] [--out FILE]

bench.flops counts the aten ops of one step's loss (bf16 autocast) and backward that run a kernel. Attention is
chunked as on an accelerator (`ACCELERATOR_CHUNK_ELEMENTS`: the count a GPU would see, not the CPU's smaller
chunks). `launches` is the eager step; `fused_launches` the same step with each helper call one region
(`fusing("on")`: the passes as `auto` builds them on a GPU), a lower bound of its kernels (a compiled region
is one to a few). An H200's step time followed the eager count (about 40 µs a launch, every method, MiniLM-L6
x 128: bench/results/step_gpu.json), so this is the CPU's forecast of the GPU's time ratio where it is
launch-bound. No timing: the counts are exact and the same on any machine with this torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

import smart_core.attention as attention
from bench.flops import method_flops
from bench.padding import fixed_batch
from bench.stepper import load_model
from smart_core import fused

METHODS = "vanilla,smart,smart+rs_arithmetic=auto+rs_dropout=shared,smart-breg-only"


def count(args: argparse.Namespace) -> dict[str, Any]:
    model, tokenizer = load_model(args.model)
    batch, labels, source = fixed_batch(tokenizer, args.batch_size, args.seq_len)
    cpu = torch.device("cpu")
    methods = [m for m in args.methods.split(",") if m]
    if not methods or methods[0] != "vanilla":
        raise ValueError("--methods must start with vanilla: every ratio is relative to it")
    cpu_chunks = attention.CHUNK_ELEMENTS
    attention.CHUNK_ELEMENTS = attention.ACCELERATOR_CHUNK_ELEMENTS  # as a GPU chunks the queries
    try:
        rows: dict[str, dict[str, Any]] = {}
        for method in methods:
            eager = method_flops(model.train(), method, batch, labels, cpu)
            with fused.fusing("on"):  # counted eager all the same (bench.flops); each helper call one region
                regions = method_flops(model.train(), method, batch, labels, cpu)
            rows[method] = {"launches": eager.launches, "fused_launches": regions.regions(),
                            "helper_calls": regions.helper_calls}  # fmt: skip
            print(f"[launch_count] {method}: {rows[method]}", file=sys.stderr, flush=True)
    finally:
        attention.CHUNK_ELEMENTS = cpu_chunks
    base = rows["vanilla"]
    for row in rows.values():
        row["launch_ratio"] = row["launches"] / base["launches"]
        row["fused_launch_ratio"] = row["fused_launches"] / base["fused_launches"]
    setup = {"model": args.model, "batch_size": args.batch_size, "seq_len": args.seq_len, "batch_source": source,
             "chunk_elements": attention.ACCELERATOR_CHUNK_ELEMENTS, "torch": torch.__version__,
             "counted": "loss under bf16 autocast + backward (bench.flops), no optimizer"}  # fmt: skip
    return {"setup": setup, "methods": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.launch_count", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--methods", default=METHODS)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    result = count(args)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    for method, row in result["methods"].items():
        print(f"{method:<50} launches {row['launches']:6d} x{row['launch_ratio']:.2f}   "
              f"fused {row['fused_launches']:6d} x{row['fused_launch_ratio']:.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
