"""Where a step's kernels come from: one profiled training step per method (issue 28, for a lent GPU).

    python -m research.kernel_profile --out profile.json [--model minilm-l6] [--label minilm-l6]
        [--batch-size 32] [--seq-len 128] [--device cuda]
        [--methods vanilla,smart,smart+rs_arithmetic=auto+rs_dropout=shared,...@unfused,smart-breg-only]

bench.step times a step and bench.flops counts its aten ops on CPU; neither says what a GPU runs. Here each
method (bench.stepper's full update, bf16 autocast, two warm-up steps first: they compile smart_core.fused's
helpers) runs one step under torch.profiler. Per method: the step's wall time (synchronised), the number of
device kernels and their summed time (`busy_share`: kernel time over wall time; far below 1 the step waits on
the host, launch-bound), the aten ops the host issued, and the top kernels and top host ops by count, which say
what to fuse next. On CPU (a dry run) there are no device kernels: the host ops are the count.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import DeviceType, ProfilerActivity, profile

from bench.padding import fixed_batch
from bench.stepper import Stepper, load_model

LINEAR = "smart+rs_arithmetic=auto+rs_dropout=shared"
METHODS = f"vanilla,smart,{LINEAR},{LINEAR}@unfused,smart-breg-only"
TOP = 15


def _synchronise(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _activities(device: torch.device) -> list[ProfilerActivity]:
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])


def profile_step(
    stepper: Stepper, batch: dict[str, Any], labels: torch.Tensor, device: torch.device
) -> dict[str, Any]:
    """One profiled step of `stepper` (warmed up by the caller): wall time, kernels, host ops."""
    _synchronise(device)
    with profile(activities=_activities(device)) as prof:
        start = time.perf_counter()
        stepper.step(dict(batch), labels)
        _synchronise(device)
        wall = time.perf_counter() - start
    rows = prof.key_averages()
    kernels = [r for r in rows if r.device_type == DeviceType.CUDA]
    host = [r for r in rows if r.device_type == DeviceType.CPU and r.key.startswith("aten::")]
    kernel_s = sum(r.self_device_time_total for r in kernels) / 1e6  # µs -> s
    return {
        "wall_s": wall,  # under the profiler: its own overhead included, for every method alike
        "kernels": sum(r.count for r in kernels),
        "kernel_s": kernel_s,
        "busy_share": kernel_s / wall if kernels else None,
        "host_aten_ops": sum(r.count for r in host),  # nested calls included (aten::to -> aten::_to_copy)
        "top_kernels": [[r.key[:120], r.count, r.self_device_time_total / 1e3] for r in
                        sorted(kernels, key=lambda r: -r.count)[:TOP]],  # name, count, ms
        "top_host_ops": [[r.key, r.count] for r in sorted(host, key=lambda r: -r.count)[:TOP]],
    }  # fmt: skip


def _profile_method(
    model: torch.nn.Module, method: str, batch: dict[str, Any], labels: torch.Tensor, device: torch.device,
    warmup: int,
) -> dict[str, Any]:  # fmt: skip
    """`method`'s profiled step on a copy of `model` after `warmup` steps (the copy is freed after)."""
    stepper = Stepper(copy.deepcopy(model), method, device, precision="bf16")
    for _ in range(warmup):
        stepper.step(dict(batch), labels)
    return profile_step(stepper, batch, labels, device)


def run(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device)
    model, tokenizer = load_model(args.model)
    batch, labels, source = fixed_batch(tokenizer, args.batch_size, args.seq_len)
    batch = {k: v.to(device) for k, v in batch.items()}
    labels = labels.to(device)
    methods: dict[str, Any] = {}
    with profile(activities=_activities(device)):  # the profiler's own start-up (CUPTI's on a GPU), untimed
        torch.ones(8, device=device).sum()
    for method in filter(None, args.methods.split(",")):
        try:
            methods[method] = _profile_method(model, method, batch, labels, device, args.warmup)
        except Exception as err:  # one method's failure is a finding; the others still run
            methods[method] = {"error": f"{type(err).__name__}: {err}"[:2000]}
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print(f"[kernel_profile] {method}: {_line(methods[method])}", file=sys.stderr, flush=True)
    base = methods.get("vanilla", {})
    for row in methods.values():
        if "error" not in row and "wall_s" in base:
            row["wall_ratio"] = row["wall_s"] / base["wall_s"]
            row["kernel_ratio"] = row["kernels"] / base["kernels"] if base.get("kernels") else None
            row["host_op_ratio"] = row["host_aten_ops"] / base["host_aten_ops"]
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    setup = {"model": args.label or args.model, "batch_size": args.batch_size, "seq_len": args.seq_len,
             "batch_source": source, "device": device_name, "torch": torch.__version__, "warmup": args.warmup}  # fmt: skip
    return {"setup": setup, "methods": methods}


def _line(row: dict[str, Any]) -> str:
    if "error" in row:
        return str(row["error"])[:200]
    busy = "-" if row["busy_share"] is None else f"{100 * row['busy_share']:.0f}%"
    return (f"{1e3 * row['wall_s']:.1f} ms, {row['kernels']} kernels ({busy} busy), "
            f"{row['host_aten_ops']} host aten ops")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.kernel_profile", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", default="minilm-l6", help="a model name or folder")
    parser.add_argument("--label", default="", help="the model's name in the output (default: --model)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--methods", default=METHODS)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    result = run(args)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
