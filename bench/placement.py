"""Where a sweep's GPU trials land on a real multi-node Ray cluster, under the worker's best-fit hints and
under Ray's own rule, and whether a whole-GPU trial then still finds room.

    python -m bench.placement [--nodes 2] [--gpus-per-node 2] [--fraction 0.5] [--out FILE]

A local multi-node cluster (`ray.cluster_utils.Cluster`: a head without GPUs and `--nodes` raylets with
logical GPUs) runs one Tune sweep of fractional trials, enough to fill one node, at once, with the same
`tune.with_resources(..., trial_resources(request, placement))` as the sweep driver. Each trial records
its node. While they all run, a placement group of one node's GPUs (a multi-GPU trial of another job) is
requested: best fit leaves a node whole for it, Ray's rule (the emptiest node) spreads the fractions and
leaves it waiting. Each placement runs in its own process (one Ray cluster per process).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

PLACEMENTS = ("best-fit", "ray")


def _trial(config: dict[str, Any]) -> None:
    import ray
    from ray import tune

    marks = Path(config["marks"])
    (marks / f"{config['i']}.node").write_text(ray.get_runtime_context().get_node_id())
    while not (marks / "release").exists():  # held until the probe has tried its whole-node request
        time.sleep(0.1)
    tune.report({"done": 1.0})


def probe(
    placement: str, nodes: int, gpus_per_node: int, fraction: float, timeout_s: float = 60.0
) -> dict[str, Any]:
    """One run under `placement`: where the trials went and whether a whole node's GPUs were then free."""
    import ray
    from ray import tune
    from ray.cluster_utils import Cluster
    from ray.util.placement_group import placement_group, remove_placement_group

    from worker.tune.placement import trial_resources

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    workers = [cluster.add_node(num_cpus=4, num_gpus=gpus_per_node) for _ in range(nodes)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    names = {w.node_id: f"node{i}" for i, w in enumerate(workers)}
    count = round(gpus_per_node / fraction)  # trials that fill exactly one node
    marks = Path(tempfile.mkdtemp(prefix="smartune-placement-"))
    trainable = tune.with_resources(_trial, trial_resources({"cpu": 0.5, "gpu": fraction}, placement))
    tuner = tune.Tuner(
        trainable,
        param_space={"i": tune.grid_search(list(range(count))), "marks": str(marks)},
        tune_config=tune.TuneConfig(max_concurrent_trials=count, reuse_actors=True),
        run_config=tune.RunConfig(storage_path=str(marks / "tune"), verbose=0),
    )
    fit = threading.Thread(target=tuner.fit, daemon=True)
    started = time.monotonic()
    fit.start()
    try:
        while len(list(marks.glob("*.node"))) < count and time.monotonic() - started < timeout_s:
            time.sleep(0.1)
        where = [names.get(p.read_text(), "head") for p in sorted(marks.glob("*.node"))]
        whole = placement_group([{"GPU": float(gpus_per_node), "CPU": 0.5}])
        ready, _ = ray.wait([whole.ready()], timeout=5.0)
        remove_placement_group(whole)
    finally:
        (marks / "release").touch()
        fit.join(timeout=timeout_s)
        ray.shutdown()
        cluster.shutdown()
    return {
        "placement": placement,
        "trials": count,
        "fraction": fraction,
        "trials_per_node": {name: where.count(name) for name in names.values()},
        "whole_node_free_while_running": bool(ready),
    }


def run(placement: str, nodes: int, gpus_per_node: int, fraction: float) -> dict[str, Any]:
    """`probe` in a fresh interpreter (a process hosts one Ray cluster at a time)."""
    code = (
        "import json, sys; from bench.placement import probe; "
        f"print('RESULT ' + json.dumps(probe({placement!r}, {nodes}, {gpus_per_node}, {fraction})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"the probe under {placement!r} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(lines[-1][len("RESULT ") :]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.placement", description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus-per-node", type=int, default=2)
    parser.add_argument("--fraction", type=float, default=0.5, help="GPUs per trial")
    parser.add_argument("--out", type=Path, default=None, help="write the results here as JSON")
    args = parser.parse_args(argv)
    results = [run(p, args.nodes, args.gpus_per_node, args.fraction) for p in PLACEMENTS]
    for r in results:
        print(f"{r['placement']:>8}: {r['trials']} trials of {r['fraction']:g} GPU -> {r['trials_per_node']}; "
              f"a whole node free while they run: {r['whole_node_free_while_running']}")  # fmt: skip
    if args.out:
        args.out.write_text(
            json.dumps({"command": "python -m bench.placement", "runs": results}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
