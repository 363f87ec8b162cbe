"""A simulated week on 64, 128 and 512 GPUs, weighted fair share against FIFO.

    python -m research.pool_sim [--sizes 64:8,128:16,512:64] [--seed 0] [--load 0.9]

Writes research/results/pool_sim.json and docs/img/pool_sim.png (research, not a
`smartune bench` benchmark: CPU-only, minutes at 512 GPUs).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from research.pool_sim import measures, simulate, workload

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "research" / "results" / "pool_sim.json"
PLOT = ROOT / "docs" / "img" / "pool_sim.png"
VARIANTS = (
    ("fair share", {"policy": "fair"}),
    ("FIFO", {"policy": "fifo"}),
    ("fair share, whole footprint to the last trial", {"policy": "fair", "release_tail": False}),
    # Ray's own placement rule (the emptiest node; research/pool_replay measured it on a real cluster)
    ("fair share, Ray's placement", {"policy": "fair", "ray_scorer": True}),
    # the worker's default: each GPU trial hinted to the fullest node that fits (worker.tune.placement)
    ("fair share, best-fit hints", {"policy": "fair", "node_fit": True}),
    ("FIFO, best-fit hints", {"policy": "fifo", "node_fit": True}),
)


def plot(series: dict[str, dict[str, list[tuple[float, float, int]]]], results: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(series)
    fig, axes = plt.subplots(2, len(sizes), figsize=(5 * len(sizes), 7), squeeze=False)
    for col, size in enumerate(sizes):
        ax = axes[0][col]
        for label, points in series[size].items():
            gpus = next(r["gpus"] for r in results if str(r["gpus"]) == size)
            ax.plot(
                [t / 3600 for t, _, _ in points], [100 * b / gpus for _, b, _ in points], label=label, lw=0.8
            )
        ax.set_title(f"{size} GPUs: GPUs busy")
        ax.set_xlabel("hours since Monday 00:00")
        ax.set_ylabel("% busy")
        ax.axvline(168, color="grey", lw=0.5)
        ax.legend(fontsize=7)
        ax = axes[1][col]
        for label in ("fair share", "FIFO"):
            run = next(r for r in results if str(r["gpus"]) == size and r["variant"] == label)
            teams = run["wait_hours_by_team"]
            ax.plot(range(len(teams)), [v["p95"] for v in teams.values()], marker="o", ms=3, label=label)
        ax.set_title(f"{size} GPUs: p95 wait per team (teams 0-3 weight 2)")
        ax.set_xlabel("team")
        ax.set_ylabel("hours")
        ax.legend(fontsize=7)
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.pool_sim", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="64:8,128:16,512:64", help="GPUs:nodes, comma list")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--load", type=float, default=0.9, help="offered GPU-hours / the pool's, over the week"
    )
    args = parser.parse_args(argv)
    results: list[dict[str, Any]] = []
    series: dict[str, dict[str, list[tuple[float, float, int]]]] = {}
    for item in args.sizes.split(","):
        gpus, nodes = (int(x) for x in item.split(":"))
        teams, jobs = workload.week(gpus, load=args.load, seed=args.seed)
        offered = sum(j.gpu_seconds for j in jobs) / (gpus * workload.WEEK)
        for label, options in VARIANTS:
            started = time.perf_counter()
            trace = simulate.run(teams, jobs, nodes=nodes, gpus_per_node=gpus // nodes, **options)
            summary = measures.summarise(trace, teams, jobs)
            results.append({"variant": label, "nodes": nodes, "offered_load": offered, **summary,
                            "simulation_s": time.perf_counter() - started})  # fmt: skip
            series.setdefault(str(gpus), {})[label] = trace.busy_series
            print(f"{gpus} GPUs / {nodes} nodes, {label}: utilisation under backlog "
                  f"{summary['utilisation_under_backlog']:.3f}, Jain {summary['jain_fairness']:.3f}, wait p50/p95/p99 "
                  f"{summary['wait_hours']['p50']:.2f}/{summary['wait_hours']['p95']:.2f}/{summary['wait_hours']['p99']:.2f} h, "
                  f"decision p99 {summary['decision_ms']['p99']:.1f} ms", flush=True)  # fmt: skip
    setup = {
        "seed": args.seed,
        "load": args.load,
        "workload": workload.__doc__,
        "command": "python -m research.pool_sim",
    }
    OUT.write_text(json.dumps({"setup": setup, "runs": results}, indent=1) + "\n")
    plot(series, results)
    print(f"-> {OUT}, {PLOT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
