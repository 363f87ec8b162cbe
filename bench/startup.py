"""Trial start-up with and without the sweep's shared data (tokenise once per sweep, issue 14).

Side by side in one run, in Ray tasks on a local cluster, as trials run: `TrainingSession.build(config)`
(read + tokenise + model) against fetching the driver's PreparedData from the object store and
`TrainingSession.build(config, data=...)`. Also the driver's one-off cost (prepare + `ray.put`).
Medians of `--repeats` builds per task. `python -m bench.startup --json > bench/results/startup.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import ray

from worker.contract.sources import glue_dir
from worker.contract.tasks import get_task
from worker.contract.trial import TrainConfig
from worker.training.models import load_tokenizer
from worker.training.prepared import prepare_data


@ray.remote(num_cpus=1)
def _build(values: dict[str, Any], shared: dict[str, Any] | None) -> dict[str, float]:
    """One trial's start-up in a Ray worker: seconds to fetch the shared data (if any) and to build."""
    from worker.training.session import TrainingSession

    config = TrainConfig.from_dict(values)
    started = time.perf_counter()
    data = ray.get(shared["ref"]) if shared is not None else None
    fetched = time.perf_counter()
    TrainingSession.build(config, data=data)
    return {"fetch_s": fetched - started, "total_s": time.perf_counter() - started}


def measure(task: str, model: str, max_seq_length: int, repeats: int) -> dict[str, Any]:
    config = TrainConfig(task=task, model=model, max_seq_length=max_seq_length, num_threads=1)
    started = time.perf_counter()
    prepared = prepare_data(config, get_task(task), load_tokenizer(model))
    ref = ray.put(prepared)
    driver_s = time.perf_counter() - started
    values = config.to_dict()
    before, after = [], []
    for _ in range(repeats):  # interleaved, so drift on a busy machine hits both alike
        before.append(ray.get(_build.remote(values, None)))
        after.append(ray.get(_build.remote(values, {"ref": ref})))
    median_before = statistics.median(r["total_s"] for r in before)
    median_after = statistics.median(r["total_s"] for r in after)
    return {
        "task": task,
        "train_examples": len(prepared.train),
        "driver_prepare_s": round(driver_s, 3),
        "trial_startup_before_s": round(median_before, 3),
        "trial_startup_after_s": round(median_after, 3),
        "trial_fetch_after_s": round(statistics.median(r["fetch_s"] for r in after), 3),
        "saved_per_trial_s": round(median_before - median_after, 3),
        "speedup": round(median_before / median_after, 2) if median_after > 0 else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="smartune bench startup", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="rte,sst2")
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if glue_dir() is None:
        print("set SMARTUNE_GLUE_DIR to a folder of GLUE data (RTE/, SST-2/, ...)", file=sys.stderr)
        return 2
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        rows = [measure(t, args.model, args.max_seq_length, args.repeats) for t in args.tasks.split(",")]
    finally:
        ray.shutdown()
    result = {
        "model": args.model,
        "max_seq_length": args.max_seq_length,
        "repeats": args.repeats,
        "tasks": rows,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for row in rows:
            print(
                f"{row['task']}: {row['train_examples']} examples; start-up {row['trial_startup_before_s']} s -> "
                f"{row['trial_startup_after_s']} s per trial (driver, once: {row['driver_prepare_s']} s)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
