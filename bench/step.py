"""`smartune bench step`: time and peak memory of one full training update per method.

A step is one `Stepper.step()` (bench/stepper.py): what worker/training/loop.py::train_step does, without
the LR schedule.
- Time: every method (and the smart-pytorch peer) on one fixed batch, interleaved round-robin in one
  process after warm-up rounds, the round's order rotated each round; the median per method over the
  samples during which no other work used the CPUs (bench.timed) is reported.
- Memory: one child process per method (`python -m bench.step --child METHOD ...`), since a process
  cannot forget its own allocator history. See `memory_note()` for what is counted.
- Padding: bench/padding.py.
- `flops_bf16_share`: the share of one step's matmul FLOPs that runs at bf16 when its forward runs under bf16
  autocast (bench/flops.py), one untimed step per method on a model copy of its own: tensor-core use, read on
  any device (SMART's exact fp32 path: 0).
- `mfu`: those FLOPs per second of the timed step over the device's measured matmul rate at the run's
  precision (`setup.matmul_tflops`: bench.flops.matmul_rate, bf16 for `--precision bf16`).
- `launches`, `launch_ratio`: the aten ops that run a kernel in that step's loss and backward, and their
  ratio to vanilla's (bench/flops.py): where a GPU step is launch-bound, its time ratio follows this one. Counted,
  like `flops_bf16_share` and `mfu`'s FLOPs, at a step without the diagnostics (as the median step is; a method's
  `+diagnostics_every=1` twin runs them every step).
  `fused_launches`, `fused_launch_ratio`: the same with each of smart_core.fused's helper calls counted as one
  compiled region, as a GPU runs them (`auto`); equal to `launches` for a method that calls none.
- `--precision bf16`: every step's loss under bf16 autocast, its backward after (as the worker trains);
  `--compile`: each copy's encoder compiled as `compile: true` compiles it. The memory children do the same.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import subprocess
import sys
from functools import partial
from typing import Any

import torch
import transformers
from torch import Tensor

from bench import CONTENTION_LIMIT, check_targets, clean_median, spread, sync, timed
from bench.flops import matmul_rate, method_flops
from bench.padding import ROOT, Batch, fixed_batch, padding_benchmark
from bench.stepper import PEER, Stepper, load_model, parse_variant
from smart_core import fused
from worker.training.adapter import EmbeddingAdapter

WARMUP_ROUNDS = 2  # untimed rounds: lazy AdamW state, allocator growth, oneDNN/cuBLAS kernel selection
MEMORY_STEPS = 3  # updates a memory child runs after its baseline (the first allocates the AdamW state)
MAX_ROUNDS_FACTOR = 3  # timed rounds stop at this multiple of --steps even if samples stay contended
MEMORY_PARALLEL = 2  # memory children at a time
METHODOLOGY = {
    "timing": "median over uncontended samples of interleaved rounds (round-robin, order rotated each round) "
    "after warm-up rounds, run until each method has `steps` of them (or 3x `steps` rounds); a sample is "
    "contended when other work used > contention_limit_cpus CPUs during it (/proc/stat incl. steal); "
    "each method has its own model copy, AdamW and objective; the peer runs in the same loop",
    "step": "objective loss + isfinite check + backward + clip 1.0 + AdamW(lr 1e-5, wd 0) + zero_grad + "
    "after_update, model in train mode; head grad-ratio diagnostics on as in worker/training/session.py; no LR schedule",
    "padding": "vanilla updates, batch 16, first N train rows truncated at 128; the same batches collated "
    "dynamically vs padded to 128, interleaved; collate + copy + update timed",
    "peer": "smart_pytorch.SMARTLoss(eval_fn=adapter.forward_from_embeddings, loss_fn=kl_loss, "
    "loss_last_fn=sym_kl_loss, num_steps=1, step_size=1e-3, noise_var=1e-5) on adapter.embed, weight 1, + CE",
}


def time_interleaved(
    steppers: dict[str, Stepper], batch: Batch, labels: Tensor, rounds: int, device: torch.device
) -> tuple[dict[str, list[float]], dict[str, list[bool]]]:
    """Seconds per update of each stepper in each timed round, and whether the sample was uncontended.

    Round-robin after WARMUP_ROUNDS, the order rotated each round. Rounds go on until every method has
    `rounds` clean samples (no other work on the CPUs, see bench.timed), or MAX_ROUNDS_FACTOR x `rounds`.
    Each method keeps its own model copy, optimiser and objective (not a weight reset per round): the
    methods then never see each other's updates or teacher state, and nothing is copied inside the loop.
    """
    names = list(steppers)
    times: dict[str, list[float]] = {n: [] for n in names}
    clean: dict[str, list[bool]] = {n: [] for n in names}
    for r in range(WARMUP_ROUNDS + MAX_ROUNDS_FACTOR * rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:  # rotate: no method always runs right after another
            seconds, foreign = timed(partial(steppers[name].step, batch, labels), device)
            if r >= WARMUP_ROUNDS:
                times[name].append(seconds)
                clean[name].append(foreign <= CONTENTION_LIMIT)
        label = (
            "warm-up" if r < WARMUP_ROUNDS else f"timed, fewest clean samples {min(map(sum, clean.values()))}"
        )
        print(f"[step] round {r + 1} ({label})", file=sys.stderr)
        if r >= WARMUP_ROUNDS and min(map(sum, clean.values())) >= rounds:
            break
    return times, clean


# -- memory ------------------------------------------------------------------------------------------------


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def memory_note(device: torch.device) -> str:
    if device.type == "cuda":
        return ("torch.cuda.max_memory_allocated() minus memory_allocated() at the baseline, in a child process "
                "per method (peak stats reset at the baseline)")  # fmt: skip
    return ("peak RSS growth, one child process per method: VmHWM (reset at the baseline via "
            "/proc/self/clear_refs) minus VmRSS at the baseline")  # fmt: skip


def child_memory(
    method: str, model_name: str, batch_size: int, seq_len: int, device: torch.device, precision: str = "fp32",
    compile: bool = False,
) -> float:  # fmt: skip
    """Peak MiB above the baseline over MEMORY_STEPS updates of `method` (run in a fresh process).

    Baseline: after the model is loaded and moved and one no-grad warm-up forward has run; the stepper
    (AdamW, objective: the Bregman teacher's weight copy) is built after it, so the teacher copy, gradients,
    AdamW moments and every activation count. The model's own weights do not.
    """
    model, tokenizer = load_model(model_name)
    batch, labels, _ = fixed_batch(tokenizer, batch_size, seq_len)
    batch, labels = {k: v.to(device) for k, v in batch.items()}, labels.to(device)
    model.to(device).train()
    with torch.no_grad():
        EmbeddingAdapter(model, is_regression=False).forward(batch)  # the baseline: weights and a forward
    sync(device)
    if device.type == "cuda":
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    else:
        base = _status_kb("VmRSS") * 1024
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM (the peak RSS) to the current RSS
    stepper = Stepper(model, method, device, precision=precision, compile=compile)
    for _ in range(MEMORY_STEPS):
        stepper.step(batch, labels)
    sync(device)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else _status_kb("VmHWM") * 1024
    return (peak - base) / 2**20


def measure_memory(methods: list[str], args: argparse.Namespace, device: torch.device) -> dict[str, float]:
    """Peak MiB per method, each from its own `python -m bench.step --child METHOD ...` process.

    Children run up to MEMORY_PARALLEL at a time: each measures only its own process, and most of a child's
    wall time is the single-threaded import of torch and transformers.
    """
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    cmd = [sys.executable, "-m", "bench.step", "--model", args.model, "--batch-size", str(args.batch_size),
           "--seq-len", str(args.seq_len), "--device", device.type, "--threads", str(torch.get_num_threads()),
           "--precision", getattr(args, "precision", "fp32"), *(["--compile"] if getattr(args, "compile", False) else [])]  # fmt: skip
    peaks: dict[str, float] = {}
    for start in range(0, len(methods), MEMORY_PARALLEL):
        group = methods[start : start + MEMORY_PARALLEL]
        procs = {m: subprocess.Popen([*cmd, "--child", m], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True) for m in group}  # fmt: skip
        for m, proc in procs.items():
            out, err = proc.communicate(timeout=900)
            if proc.returncode != 0:
                raise RuntimeError(f"memory child for {m} failed ({proc.returncode}): {err[-2000:]}")
            peaks[m] = float(json.loads(out.strip().splitlines()[-1])["peak_mb"])
            print(f"[memory] {m}: {peaks[m]:.1f} MiB", file=sys.stderr)
    return peaks


# -- the command -------------------------------------------------------------------------------------------


def _device(requested: str) -> tuple[torch.device, str | None]:
    if requested.startswith("cuda") and not torch.cuda.is_available():
        return torch.device("cpu"), f"--device {requested} requested but no GPU is visible: ran on cpu"
    return torch.device(requested), None


def expand_methods(methods: str, modes: str) -> list[str]:
    """The methods to time: the list as given, plus `METHOD+rs_dropout=MODE` for every method that
    computes R_s and every mode in `modes` other than the method's own."""
    out = [m.strip() for m in methods.split(",") if m.strip()]
    for label in list(out):
        config = parse_variant(label)
        for mode in (m.strip() for m in modes.split(",") if m.strip()):
            if config.uses_smoothness and mode != config.rs_dropout:
                out.append(f"{label}+rs_dropout={mode}")
    return out


def amortized(step_s: dict[str, float]) -> dict[str, float]:
    """Per method with a `+diagnostics_every=1` twin: the mean step cost at the method's own diagnostics
    interval (a median over a few steps would miss the one step in N that measures them)."""
    out = {}
    for label, seconds in step_s.items():
        twin = f"{label}+diagnostics_every=1"
        every = parse_variant(label).diagnostics_every if label != PEER else 0
        if twin in step_s and every:
            out[label] = seconds + (step_s[twin] - seconds) / every
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole benchmark as one JSON-able dict (progress on stderr)."""
    methods = expand_methods(args.methods, getattr(args, "rs_dropout", "") or "")
    if "vanilla" not in methods:
        raise ValueError("--methods must include vanilla: every ratio is relative to it")
    if args.steps < 1 or args.batch_size < 1 or args.seq_len < 4:
        raise ValueError("--steps and --batch-size must be >= 1, --seq-len >= 4")
    device, note = _device(args.device)
    load_start = os.getloadavg()[0]
    model, tokenizer = load_model(args.model)
    batch, labels, source = fixed_batch(tokenizer, args.batch_size, args.seq_len)
    batch, labels = {k: v.to(device) for k, v in batch.items()}, labels.to(device)
    try:
        import smart_pytorch  # noqa: F401

        peer_error = None
    except ImportError as err:
        peer_error = f"smart-pytorch not installed ({err}): pip install 'smartune[bench]'"
    timed = methods + ([PEER] if peer_error is None else [])
    precision, compiled = getattr(args, "precision", "fp32"), bool(getattr(args, "compile", False))
    steppers = {
        m: Stepper(copy.deepcopy(model), m, device, precision=precision, compile=compiled) for m in timed
    }
    times, clean = time_interleaved(steppers, batch, labels, args.steps, device)
    del steppers
    step_s = {m: clean_median(times[m], clean[m]) for m in times}
    peak = measure_memory(methods, args, device)
    # counted at the step the median times: updates_done=1 runs no diagnostics (except where they run every step)
    flops = {m: method_flops(model, m, batch, labels, device, updates_done=1) for m in methods}
    with fused.fusing(
        "on"
    ):  # each helper one region, the passes as a GPU builds them (`auto`): counted eager
        regions = {m: method_flops(model, m, batch, labels, device, updates_done=1).regions()
                   if flops[m].helper_calls else
                   flops[m].launches for m in methods}  # fmt: skip
    rate = matmul_rate(device, torch.bfloat16 if precision == "bf16" else torch.float32)
    results = {
        m: {"step_s": step_s[m], "peak_mb": peak[m], "time_ratio": step_s[m] / step_s["vanilla"],
            "mem_ratio": peak[m] / peak["vanilla"], "flops_bf16_share": flops[m].share(torch.bfloat16),
            "matmul_gflop": flops[m].total() / 1e9,
            "launches": flops[m].launches, "launch_ratio": flops[m].launches / flops["vanilla"].launches,
            "fused_launches": regions[m], "fused_launch_ratio": regions[m] / regions["vanilla"],
            "mfu": flops[m].total() / step_s[m] / rate}
        for m in methods
    }  # fmt: skip
    for m, seconds in amortized(step_s).items():
        results[m] |= {"amortized_step_s": seconds, "amortized_time_ratio": seconds / step_s["vanilla"]}
    peer: dict[str, Any] = {"smart_pytorch": {"skipped": peer_error}}
    if peer_error is None:
        entry: dict[str, Any] = {"step_s": step_s[PEER], "time_ratio": step_s[PEER] / step_s["vanilla"]}
        if "smart-rs-only" in step_s:
            entry["smart_rs_only_vs_peer"] = step_s["smart-rs-only"] / step_s[PEER]
            entry["paired_ratio_quartiles"] = spread(times, clean, unit=PEER)["smart-rs-only"]
        peer["smart_pytorch"] = entry
    tasks = [t.strip() for t in (args.padding_tasks or "").split(",") if t.strip()]
    padding = padding_benchmark(
        tasks,
        tokenizer,
        lambda n: Stepper(load_model(args.model, n)[0], "vanilla", device).step,
        device,
        examples=int(getattr(args, "padding_examples", 256)),
        batch_size=16,
    )
    n_params = sum(p.numel() for p in model.parameters())
    cpu = platform.processor() or platform.machine()
    setup = {
        "model": args.model, "params": n_params, "param_mb": n_params * 4 / 2**20,
        "device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu,
        "device_note": note, "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
        "loadavg_1min": {"start": load_start, "end": os.getloadavg()[0]},  # well above `threads`: shared CPUs
        "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
        "batch_size": args.batch_size, "seq_len": args.seq_len, "batch_source": source,
        "precision": precision, "compile": compiled, "matmul_tflops": rate / 1e12,
        "steps": args.steps, "warmup_rounds": WARMUP_ROUNDS, "contention_limit_cpus": CONTENTION_LIMIT,
        "timing_contended": min(map(sum, clean.values())) < args.steps, **METHODOLOGY,
        "memory": memory_note(device), "memory_steps": MEMORY_STEPS,
    }  # fmt: skip
    return {"methods": results, "peer": peer, "padding": padding, "setup": setup,
            "spread": spread(times, clean), "targets": check_targets(results, peer, padding)}  # fmt: skip


def _table(result: dict[str, Any]) -> str:
    rows = [f"{m:<16} {r['step_s']:8.4f}s x{r['time_ratio']:.2f} {r['peak_mb']:8.1f} MiB x{r['mem_ratio']:.2f} "
             f"launches x{r['launch_ratio']:.2f}"
            for m, r in result["methods"].items()]  # fmt: skip
    rows += [f"{k}: {json.dumps(v)}" for k in ("peer", "padding", "targets") for v in [result[k]]]
    return "\n".join(rows)


def main(args: argparse.Namespace) -> int:
    """Entry point of `smartune bench step`: one JSON object (--json) or a table on stdout."""
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else _table(result))
    return 0


def _child_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.step", description="memory child of bench step")
    parser.add_argument("--child", required=True, help="method to measure")
    parser.add_argument("--model", required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--compile", action="store_true")
    a = parser.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    peak = child_memory(
        a.child, a.model, a.batch_size, a.seq_len, torch.device(a.device), a.precision, a.compile
    )
    print(json.dumps({"method": a.child, "peak_mb": peak}))
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
