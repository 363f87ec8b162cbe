"""`python -m bench.estimate`: how far the control plane's estimate is from a real training's time.

A few tiny real trainings (MiniLM on the first RTE training rows of the GLUE copy, a few epochs, vanilla
and SMART, two max_seq_lengths: one calibrated exactly, one through the nearest-length fallback) run in
this process through the trial's own code (`TrainingSession.build`, then `run_training`, threads = the
spec's CPUs), each beside the plan `service.costs.estimate.plan` made for its spec with the packaged
calibration (service/costs/calibration.json). Reported per run: estimated vs measured epoch time
(training + evaluation, the calibrated part) and the relative error (estimated - measured) / measured;
the session build (the in-process part of a trial's overhead) is reported beside it. Goal: |error| <= 25%.
Not a test: the numbers depend on the machine and on whatever else runs on it (the load is reported).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from bench.padding import glue_root
from service.config import Settings
from service.costs.calibration import default_document, from_document
from service.costs.estimate import plan
from service.store.models import Team
from worker.contract.spec import JobSpec
from worker.contract.trial import TrainConfig
from worker.training.finetune import RunCallbacks, run_training
from worker.training.session import TrainingSession
from worker.tune.tuning import trial_configs

GOAL = 0.25
RUNS = (  # (method, max_seq_length, epochs): 64 is measured (bench/results/step.json); 128 falls back
    ("vanilla", 64, 2),
    ("smart", 64, 2),
    ("vanilla", 128, 1),
    ("smart", 128, 1),
)


def document(method: str, seq: int, epochs: int, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "task": "rte",
        "model": args.model,
        "method": method,
        "training": {
            "epochs": epochs,
            "batch_size": 16,
            "max_seq_length": seq,
            "max_train_samples": args.train_samples,
            "max_eval_samples": args.eval_samples,
        },  # fmt: skip
        "resources": {"cpus": args.cpus},
    }


def measure(spec: JobSpec, cpus: int, glue: Path) -> dict[str, Any]:
    """One training of the spec's first trial: build seconds, then each epoch's (training + evaluation)."""
    config = TrainConfig.from_dict({**trial_configs(spec, cpus)[0], "data": str(glue)})
    tick = time.perf_counter()
    session = TrainingSession.build(config)
    build_s = time.perf_counter() - tick
    marks = [time.perf_counter()]
    run_training(
        config, None, RunCallbacks(on_epoch_end=lambda *_: marks.append(time.perf_counter())), session
    )
    epochs = [b - a for a, b in zip(marks, marks[1:], strict=False)]
    return {"build_s": build_s, "epoch_s": epochs, "train_examples": len(session.train)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    glue = glue_root()
    if glue is None:
        raise SystemExit("no GLUE copy: set SMARTUNE_GLUE_DIR (or provide ../shared/data/glue)")
    torch.set_num_threads(args.cpus)
    settings = Settings(data_dir=Path("/tmp/smartune-bench-estimate"), glue_dir=glue)
    table = from_document(default_document())
    load_start = os.getloadavg()[0]
    rows = []
    for method, seq, epochs in RUNS:
        spec = JobSpec.model_validate(document(method, seq, epochs, args))
        group = plan(spec, settings=settings, team=Team(name="bench", max_priority=0), calibration=table)[
            "groups"
        ][0]
        measured = measure(spec, args.cpus, glue)
        estimated_epochs = group["seconds_per_epoch"] * epochs
        measured_epochs = sum(measured["epoch_s"])
        row = {
            "method": method, "max_seq_length": seq, "epochs": epochs,
            "train_examples": group["train_examples"], "eval_examples": group["eval_examples"],
            "fallback": group["calibration"]["fallback"],
            "estimated_epochs_s": estimated_epochs, "measured_epochs_s": measured_epochs,
            "error": (estimated_epochs - measured_epochs) / measured_epochs,
            "measured_epoch_s": measured["epoch_s"], "build_s": measured["build_s"],
            "estimated_overhead_s": group["calibration"]["overhead_s"],
        }  # fmt: skip
        rows.append(row)
        print(f"[estimate] {method} seq {seq} x{epochs}: estimated {estimated_epochs:.1f} s, measured "
              f"{measured_epochs:.1f} s ({row['error']:+.0%}); build {measured['build_s']:.1f} s", file=sys.stderr)  # fmt: skip
    worst = max(abs(r["error"]) for r in rows)
    return {
        "runs": rows,
        "worst_abs_error": worst,
        "target": {"value": worst, "target": f"<= {GOAL:.0%}", "met": worst <= GOAL},
        "setup": {
            "model": args.model,
            "cpus": args.cpus,
            "threads": torch.get_num_threads(),
            "train_samples": args.train_samples,
            "eval_samples": args.eval_samples,
            "cpu_count": os.cpu_count(),
            "loadavg_1min": {"start": load_start, "end": os.getloadavg()[0]},
            "calibration": "service/costs/calibration.json (packaged default)",
        },  # fmt: skip
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.estimate", description=__doc__)
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs per trial (= torch threads)")
    parser.add_argument("--train-samples", type=int, default=96)
    parser.add_argument("--eval-samples", type=int, default=32)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else json.dumps(result["target"]))
    return 0 if result["target"]["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
