"""Benchmarks (not tests), run as `smartune bench ...`; see bench/README.md.

The step benchmark (`smartune bench step`) is `bench.step` (the command, the timing loop, the memory
children) and `bench.padding` (the fixed batch and the dynamic-padding comparison). This package module
holds the small helpers both use and imports nothing heavy (torch only inside `sync`).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch stays out of `import bench` (bench.api_load needs no torch)
    import torch


def sync(device: torch.device) -> None:
    """Wait for queued GPU work, so a wall-clock reading covers it (no-op on CPU)."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def spread(times: dict[str, list[float]], unit: str = "vanilla") -> dict[str, dict[str, float]]:
    """Noise report: min and quartiles of each method's step time, and of its per-round ratio to `unit`."""

    def q(values: list[float]) -> tuple[float, float, float]:
        if len(values) < 2:
            return values[0], values[0], values[0]
        p25, p50, p75 = statistics.quantiles(values, n=4, method="inclusive")
        return p25, p50, p75

    out: dict[str, dict[str, float]] = {}
    for name, values in times.items():
        p25, _, p75 = q(values)
        r25, r50, r75 = q([t / u for t, u in zip(values, times[unit], strict=True)])
        out[name] = {"min_s": min(values), "p25_s": p25, "p75_s": p75,
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
        "smart_time_ratio": check(smart.get("time_ratio"), "<=", 3.0),
        "smart_mem_ratio": check(smart.get("mem_ratio"), "<=", 2.0),
        "smart_rs_only_vs_peer": check(peer.get("smart_pytorch", {}).get("smart_rs_only_vs_peer"), "<=", 1.0),
    }
    for task, res in padding.items():
        out[f"padding_speedup_{task}"] = check(res.get("speedup"), ">=", 1.5)
    return out
