"""A step's host time at negligible compute: what a launch-bound GPU step waits on, measured on CPU.

    python -m research.host_overhead [--model minilm-l6] [--batch-size 1] [--seq-len 8] [--rounds 12]
        [--methods vanilla,smart,smart+rs_arithmetic=auto+rs_dropout=shared,smart-breg-only] [--out FILE]

At a batch of one short sequence a step's kernels do almost no arithmetic, so its time is Python, the
dispatcher and autograd: the host's cost of issuing the step's kernels, which a GPU cannot hide when each of its
kernels is shorter than its launch (an H200 at MiniLM-L6 x 128, batch 32: bench/results/step_gpu.json). Each
method's loss (under bf16 autocast, as the worker runs it) and backward are timed, interleaved round-robin on one
thread, the first two rounds untimed; the optimizer is left out (its update of the 22M weights is memory-bound
work on CPU, a few fused launches on a GPU). The `launches` column is bench.flops's kernel count for the same
loss and backward. A method tagged `@fused` (`smart+rs_arithmetic=auto+rs_dropout=shared@fused`) runs with
smart_core.fused's helpers compiled (as `auto` runs them on a GPU; bench.stepper's tags), the others eager here;
its launches are not counted (a compiled helper's kernels are not aten ops): its host time is the measurement.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from bench.flops import method_flops
from bench.padding import fixed_batch
from bench.stepper import Stepper, load_model

METHODS = "vanilla,smart,smart+rs_arithmetic=auto+rs_dropout=shared,smart-breg-only"


FUSED = "@fused"


def _loss_and_backward(stepper: Stepper, batch: dict[str, Any], labels: torch.Tensor) -> float:
    """Seconds for one loss (bf16 autocast) and its backward; the gradients are dropped after."""
    with stepper.helpers():
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = stepper.loss(batch, labels)
        loss.backward()  # type: ignore[no-untyped-call]
        seconds = time.perf_counter() - start
    stepper.optimizer.zero_grad(set_to_none=True)
    if stepper.objective is not None:
        stepper.objective.after_update()
    return seconds


def run(args: argparse.Namespace) -> dict[str, Any]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the host's cost per launch, not the CPU's parallel arithmetic
    try:
        return _measure(args)
    finally:
        torch.set_num_threads(threads)


def _measure(args: argparse.Namespace) -> dict[str, Any]:
    methods = [m for m in args.methods.split(",") if m]
    if not methods or methods[0] != "vanilla":
        raise ValueError("--methods must start with vanilla: every ratio is relative to it")
    model, tokenizer = load_model(args.model)
    batch, labels, _ = fixed_batch(tokenizer, args.batch_size, args.seq_len)
    cpu = torch.device("cpu")
    steppers = {m: Stepper(copy.deepcopy(model), m, cpu, precision="bf16") for m in methods}
    times: dict[str, list[float]] = {m: [] for m in methods}
    for round_ in range(args.rounds + 2):
        order = methods[round_ % len(methods) :] + methods[: round_ % len(methods)]
        for method in order:
            seconds = _loss_and_backward(steppers[method], dict(batch), labels)
            if round_ >= 2:
                times[method].append(seconds)
    median = {m: statistics.median(v) for m, v in times.items()}
    launches = {m: method_flops(model.train(), m, batch, labels, cpu).launches for m in methods
                if not m.endswith(FUSED)}  # fmt: skip
    rows = {m: {"host_ms": 1e3 * median[m], "host_ratio": median[m] / median["vanilla"],
                "launches": launches.get(m), "launch_ratio": launches[m] / launches["vanilla"] if m in launches else None}
            for m in methods}  # fmt: skip
    setup = {"model": args.model, "batch_size": args.batch_size, "seq_len": args.seq_len, "rounds": args.rounds,
             "threads": 1, "torch": torch.__version__, "step": "loss under bf16 autocast + backward, no optimizer"}  # fmt: skip
    return {"methods": rows, "setup": setup}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.host_overhead", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--seq-len", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--methods", default=METHODS)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    result = run(args)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    for method, row in result["methods"].items():
        launches = "-" if row["launch_ratio"] is None else f"x{row['launch_ratio']:.2f}"
        print(f"{method:<50} {row['host_ms']:8.1f} ms x{row['host_ratio']:.2f}  launches {launches}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
