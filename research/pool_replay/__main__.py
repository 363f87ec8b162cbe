"""Replay a short workload through a real multi-node Ray cluster and `smartune serve`, and through the
simulation, and compare their waits.

    python -m research.pool_replay [--seed 0] [--jobs 20] [--teams 4] [--nodes 3] [--gpus-per-node 2]
                                   [--load 1.3] [--sleep 15:45] [--interval 2] [--placement best-fit|ray]
                                   [--out research/results/pool_replay.json]

Takes about 10 minutes on a 2-core machine (the workload's arrivals plus its drain, and a minute to start the
cluster). Writes the JSON (the workload, every job's times on both paths, the overheads, the table, the
verdict) unless `--out ''`.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from research.pool_replay import cluster, compare, real, workload
from research.pool_sim.workload import Job, Team

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "research" / "results" / "pool_replay.json"


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(
    params: workload.Params,
    *,
    nodes: int,
    gpus_per_node: int,
    interval_s: float = 2.0,
    cpus_per_node: int | None = None,
    timeout_s: float = 1800.0,
    fixed_overheads: dict[str, Any] | None = None,
    overheads_from: str | None = None,
    placement: str = "best-fit",
) -> dict[str, Any]:
    """The whole comparison; every process it starts is stopped before it returns or raises."""
    teams, jobs = workload.draw(params)
    cpus = cpus_per_node or max(2, int(gpus_per_node / min(g for g, _ in workload.GPUS)))  # never the limit
    started = time.monotonic()
    with cluster.stack(
        teams,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        cpus_per_node=cpus,
        interval_s=interval_s,
        placement=placement,
    ) as s:
        setup_s = time.monotonic() - started
        log(
            f"cluster and server up in {setup_s:.0f} s: {nodes} nodes x {gpus_per_node} GPUs, {s.server.url if s.server else ''}"
        )
        t0, records, order = real.replay(s, teams, jobs, timeout_s=timeout_s, log=log)
    setup = {
        "command": "python -m research.pool_replay",
        "workload": {
            **params.as_dict(),
            "window_s": workload.window_s(jobs, params),
            "doc": workload.__doc__,
        },
        "teams": [asdict(t) for t in teams],
        "jobs": [asdict(j) for j in jobs],
        "cluster": {
            "head": "0 GPUs, 1 CPU (the drivers)",
            "worker_nodes": nodes,
            "gpus_per_node": gpus_per_node,
            "cpus_per_node": cpus,
            "ray": "ray start --block per node, token auth, logical GPUs",
            "placement": placement,  # SMARTUNE_TRIAL_PLACEMENT (worker.tune.placement)
        },  # fmt: skip
        "engine_interval_s": interval_s,
        "policy": "weighted fair share (service.engine.scheduler.plan), no quota or job cap binding",
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "setup_s": setup_s,
        "replay_s": time.monotonic() - started - setup_s,
        "trial_sleeps": order,
    }
    if overheads_from:
        setup["overheads_from"] = overheads_from
    return analyse(setup, teams, jobs, records, t0, fixed_overheads)


def analyse(
    setup: dict[str, Any],
    teams: list[Team],
    jobs: list[Job],
    records: list[real.JobTimes],
    t0: float,
    fixed_overheads: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The real path's overheads and measures, the simulations of the same jobs, and the comparison. With
    `fixed_overheads` (measured on another run) the simulation predicts this run out of sample; the
    overheads this run measured are recorded beside them."""
    c = setup["cluster"]
    measured = compare.overheads(records, jobs)
    over = fixed_overheads or measured
    setup = {**setup, "overheads_source": setup.get("overheads_from") or "measured on this run (in sample)",
             "overheads_measured_here": measured}  # fmt: skip
    by_id = {r.id: r for r in records}
    # The simulation sees what the real path saw: each job arriving when it was submitted, its trials in
    # the order the driver handed them to Tune.
    sim_jobs = [
        replace(j, arrival=by_id[j.id].submitted, durations=tuple(setup["trial_sleeps"][j.id])) for j in jobs
    ]
    gpus = float(c["worker_nodes"] * c["gpus_per_node"])
    shape = {
        "nodes": c["worker_nodes"],
        "gpus_per_node": c["gpus_per_node"],
        "round_s": setup["engine_interval_s"],
    }
    real_summary = compare.summarise(records, gpus)
    variants = {
        "no overheads, best fit": compare.simulated(teams, sim_jobs, **shape),
        "overheads, best fit": compare.simulated(teams, sim_jobs, **shape, over=over),
    }
    # Runs recorded before the worker's best-fit hints existed were placed by Ray's own rule.
    hinted = c.get("placement", "ray") == "best-fit"
    modelled = compare.simulated(teams, sim_jobs, **shape, over=over, node_cpus=float(c["cpus_per_node"]),
                                 node_fit=hinted)  # fmt: skip
    other_rule = "Ray's placement" if hinted else "best-fit hints"  # the rule this run did not use
    variants["overheads, " + other_rule] = compare.simulated(
        teams, sim_jobs, **shape, over=over, node_cpus=float(c["cpus_per_node"]), node_fit=not hinted
    )
    if not fixed_overheads and "start_delay_by_job_s" in measured:  # in sample: each job's own start delay
        variants["overheads per job, " + ("best-fit hints" if hinted else "Ray's placement")] = compare.simulated(
            teams, sim_jobs, **shape, over=over, node_cpus=float(c["cpus_per_node"]), node_fit=hinted,
            per_job_start=True,
        )  # fmt: skip
    summary = compare.summarise(modelled, gpus)
    rows = compare.table(real_summary, summary)
    return {
        "setup": setup,
        "overheads": over,
        "real": {"summary": real_summary, "jobs": [asdict(r) for r in records], "t0_epoch_s": t0},
        "sim": {
            "variant": "overheads, best-fit hints" if hinted else "overheads, Ray's placement",
            "summary": summary,
            "jobs": [asdict(r) for r in modelled],
        },
        "other_sims": {
            name: {
                "summary": (s := compare.summarise(v, gpus)),
                "table": compare.table(real_summary, s),
                "verdict": compare.verdict(compare.table(real_summary, s)),
            }
            for name, v in variants.items()
        },  # fmt: skip
        "table": rows,
        "verdict": compare.verdict(rows),
    }


def reanalyse(path: Path) -> dict[str, Any]:
    """The simulation and comparison again, from the real path recorded in an earlier result."""
    old = json.loads(path.read_text())
    teams = [Team(**t) for t in old["setup"]["teams"]]
    jobs = [Job(**{**j, "durations": tuple(j["durations"])}) for j in old["setup"]["jobs"]]
    records = [real.JobTimes(**{**r, "sleeps": [tuple(x) for x in r["sleeps"]], "held": [tuple(x) for x in r["held"]]})
               for r in old["real"]["jobs"]]  # fmt: skip
    return analyse(old["setup"], teams, jobs, records, old["real"]["t0_epoch_s"])


def print_table(result: dict[str, Any]) -> None:
    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"

    for row in result["table"]:
        diff = "-" if row["rel_diff"] is None else f"{100 * row['rel_diff']:+.1f}%"
        log(f"{row['measure']:<40} real {fmt(row['real']):>8}  sim {fmt(row['sim']):>8}  {diff:>8}")
    log(json.dumps(result["verdict"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.pool_replay", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--teams", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=3, help="worker nodes (the head has no GPUs)")
    parser.add_argument("--gpus-per-node", type=int, default=2)
    parser.add_argument(
        "--load", type=float, default=1.3, help="offered / the pool's GPU-seconds over the arrivals"
    )
    parser.add_argument("--sleep", default="15:45", help="trial sleeps, LOW:HIGH seconds")
    parser.add_argument("--interval", type=float, default=2.0, help="the engine's scheduler interval (s)")
    parser.add_argument("--out", default=str(OUT), help="the result's JSON ('' to write none)")
    parser.add_argument(
        "--reanalyse", metavar="JSON", help="no cluster: simulate and compare a recorded replay again"
    )
    parser.add_argument(
        "--overheads-from", metavar="JSON", help="simulate with the overheads an earlier replay measured"
    )
    parser.add_argument(
        "--placement",
        choices=("best-fit", "ray"),
        default="best-fit",
        help="SMARTUNE_TRIAL_PLACEMENT of the drivers",
    )
    args = parser.parse_args(argv)
    if args.reanalyse:
        result = reanalyse(Path(args.reanalyse))
        print_table(result)
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        return 0
    low, high = (float(x) for x in args.sleep.split(":"))
    params = workload.Params(seed=args.seed, teams=args.teams, jobs=args.jobs, load=args.load,
                             pool_gpus=float(args.nodes * args.gpus_per_node), sleep_min_s=low, sleep_max_s=high)  # fmt: skip
    fixed = json.loads(Path(args.overheads_from).read_text())["overheads"] if args.overheads_from else None
    result = run(params, nodes=args.nodes, gpus_per_node=args.gpus_per_node, interval_s=args.interval,
                 fixed_overheads=fixed, overheads_from=args.overheads_from, placement=args.placement)  # fmt: skip
    print_table(result)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        log(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
