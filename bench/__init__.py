"""Benchmarks (not tests), run as `smartune bench ...`; see bench/README.md.

The step benchmark (`smartune bench step`) is `bench.step` (the command, the timing loop, the memory
children), `bench.stepper` (one training update per method, also used by research.memory and research.numerics)
and `bench.padding` (the fixed batch and the dynamic-padding comparison). This package module holds the
small helpers they use and imports nothing heavy (torch only inside `sync`).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch stays out of `import bench` (bench.api_load needs no torch)
    import torch

# A timed sample during which other processes (or the hypervisor: steal time) used more than this many
# CPUs on average is "contended": it is retried (padding) or left out of the median (step times).
CONTENTION_LIMIT = 0.15
_JIFFY_SLACK = 2  # /proc/stat counts in ticks: tolerate this many ticks of rounding per sample


def sync(device: torch.device) -> None:
    """Wait for queued GPU work, so a wall-clock reading covers it (no-op on CPU)."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def _jiffies() -> tuple[int, int] | None:
    """(busy ticks of all CPUs incl. steal, ticks of this process), or None where /proc is missing."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
        with open("/proc/self/stat") as f:
            own = f.read().rsplit(")", 1)[1].split()  # fields from 3 (state) on: utime is 14, stime 15
    except OSError:
        return None
    return sum(v) - v[3] - v[4], int(own[11]) + int(own[12])


def timed(fn: Callable[[], object], device: torch.device) -> tuple[float, float]:
    """(wall seconds of fn(), CPUs other work used meanwhile); synchronised on CUDA."""
    sync(device)
    before, start = _jiffies(), time.perf_counter()
    fn()
    sync(device)
    seconds, after = time.perf_counter() - start, _jiffies()
    if before is None or after is None:
        return seconds, 0.0
    foreign = (after[0] - before[0]) - (after[1] - before[1]) - _JIFFY_SLACK
    return seconds, max(0, foreign) / os.sysconf("SC_CLK_TCK") / seconds


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    p25, p50, p75 = statistics.quantiles(values, n=4, method="inclusive")
    return p25, p50, p75


def clean_median(values: list[float], clean: list[bool]) -> float:
    """Median over the uncontended samples (over all of them when none is clean)."""
    kept = [v for v, ok in zip(values, clean, strict=True) if ok]
    return statistics.median(kept or values)


def spread(
    times: dict[str, list[float]], clean: dict[str, list[bool]], unit: str = "vanilla"
) -> dict[str, dict[str, float]]:
    """Noise report per method: clean/total samples, min and quartiles of the step time, and quartiles of
    its per-round ratio to `unit` (rounds where both were clean; all rounds when there is none)."""
    out: dict[str, dict[str, float]] = {}
    for name, values in times.items():
        kept = [v for v, ok in zip(values, clean[name], strict=True) if ok] or values
        both = [i for i, (a, b) in enumerate(zip(clean[name], clean[unit], strict=True)) if a and b]
        rounds = both or list(range(len(values)))
        p25, _, p75 = _quartiles(kept)
        r25, r50, r75 = _quartiles([values[i] / times[unit][i] for i in rounds])
        out[name] = {"clean_samples": sum(clean[name]), "samples": len(values), "min_s": min(values),
                     "p25_s": p25, "p75_s": p75,
                     "paired_ratio_p25": r25, "paired_ratio_median": r50, "paired_ratio_p75": r75}  # fmt: skip
    return out


def check_targets(
    methods: dict[str, dict[str, float]], peer: dict[str, Any], padding: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """The README's targets, each as {value, target, met}; met is None when the value is missing."""

    def check(value: float | None, op: str, bound: float) -> dict[str, Any]:
        met = None if value is None else (value <= bound if op == "<=" else value >= bound)
        return {"value": value, "target": f"{op} {bound}", "met": met}

    smart = methods.get("smart", {})
    out = {
        # The mean cost of a step at SMART's own diagnostics interval, when the bench measured it.
        "smart_time_ratio": check(smart.get("amortized_time_ratio", smart.get("time_ratio")), "<=", 3.0),
        "smart_mem_ratio": check(smart.get("mem_ratio"), "<=", 2.0),
        "smart_rs_only_vs_peer": check(peer.get("smart_pytorch", {}).get("smart_rs_only_vs_peer"), "<=", 1.0),
    }
    for task, res in padding.items():
        out[f"padding_speedup_{task}"] = check(res.get("speedup"), ">=", 1.5)
    return out
