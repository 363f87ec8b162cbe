"""`python -m research.memory`: peak accelerator memory and step time of one training update per model x
method x batch x sequence length x precision: the measurements behind the control plane's memory
estimate (service/costs/memory.py).

On CUDA every configuration runs in this one process, one after another, because
`torch.cuda.max_memory_allocated` counts live tensor bytes, which the allocator's history does not
change (the peak is reset at each baseline). On CPU only the step time is taken (`peak_mb` null):
there `bench step`'s memory column (one child process per method) is the measurement.

Per configuration: a fresh copy of the model is moved to the device and one no-grad forward runs; that
is the baseline (`weights_mb`: the parameters alone). Then `bench.stepper.Stepper` (AdamW, the method's
objective with its teacher copy) runs MEMORY_STEPS updates, the first of which allocates AdamW's moments,
under bf16 autocast for `bf16` (the objective itself leaves autocast where SMART's perturbation would
round away, as in training). `peak_mb` is the peak above the baseline: gradients, AdamW moments, the
teacher's copy, activations and the method's extra forwards. `step_s` is the median of TIMED_STEPS
further updates, each synchronised.
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

from bench import sync
from bench.padding import fixed_batch
from bench.step import MEMORY_STEPS
from bench.stepper import Stepper, load_model
from worker.training.adapter import EmbeddingAdapter

TIMED_STEPS = 5
MiB = 2**20


def measure(
    model: torch.nn.Module, tokenizer: Any, method: str, batch_size: int, seq_len: int, precision: str,
    device: torch.device,
) -> dict[str, float | None]:  # fmt: skip
    """One configuration: MiB above the baseline at the peak, the weights' MiB and the median step."""
    batch, labels, _ = fixed_batch(tokenizer, batch_size, seq_len)
    batch, labels = {k: v.to(device) for k, v in batch.items()}, labels.to(device)
    model = copy.deepcopy(model).to(device).train()
    with torch.no_grad():
        EmbeddingAdapter(model, is_regression=False).forward(batch)
    cuda = device.type == "cuda"
    sync(device)
    base = torch.cuda.memory_allocated(device) if cuda else 0
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    stepper = Stepper(model, method, device)

    def step(stepper: Stepper) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            stepper.step(batch, labels)

    for _ in range(MEMORY_STEPS):
        step(stepper)
    sync(device)
    peak = torch.cuda.max_memory_allocated(device) if cuda else None
    times = []
    for _ in range(TIMED_STEPS):
        tick = time.perf_counter()
        step(stepper)
        sync(device)
        times.append(time.perf_counter() - tick)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    del stepper, model
    if cuda:
        torch.cuda.empty_cache()
    return {
        "peak_mb": None if peak is None else (peak - base) / MiB,
        "weights_mb": weights / MiB,
        "step_s": statistics.median(times),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device)
    rows = []
    for model_name in args.models.split(","):
        model, tokenizer = load_model(model_name)
        config: Any = model.config  # the transformers config
        for method in args.methods.split(","):
            for batch_size in map(int, args.batch_sizes.split(",")):
                for seq_len in map(int, args.seq_lens.split(",")):
                    for precision in args.precisions.split(","):
                        cell = measure(model, tokenizer, method, batch_size, seq_len, precision, device)
                        row = {"model": args.labels.get(model_name, model_name), "method": method,
                               "batch_size": batch_size, "seq_len": seq_len, "precision": precision,
                               "hidden": config.hidden_size, "layers": config.num_hidden_layers,
                               "params": sum(p.numel() for p in model.parameters()), **cell}  # fmt: skip
                        rows.append(row)
                        print(f"[memory] {row['model']} {method} b{batch_size} s{seq_len} {precision}: "
                              f"{cell['peak_mb'] or 0:.0f} MiB, {(cell['step_s'] or 0.0) * 1e3:.1f} ms", file=sys.stderr)  # fmt: skip
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    setup = {"device": name, "torch": torch.__version__,
             "memory_steps": MEMORY_STEPS, "timed_steps": TIMED_STEPS, "note": __doc__.split("\n\n")[2]}  # fmt: skip
    return {"setup": setup, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.memory", description=__doc__)
    parser.add_argument("--models", default="minilm-l6", help="comma-separated model names or paths")
    parser.add_argument("--label", action="append", default=[], help="PATH=NAME: report a path as NAME")
    parser.add_argument("--methods", default="vanilla,smart,smart-renorm,smart-rs-only,smart-breg-only,r3f")
    parser.add_argument("--batch-sizes", default="8,32")
    parser.add_argument("--seq-lens", default="128,512")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.labels = dict(label.split("=", 1) for label in args.label)
    result = run(args)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
