"""`smartune sweep SPEC`: run (or resume) a sweep locally: Ray Tune over the spec's grid, MLflow records.

A thin shell over `python -m worker.tune.sweep` (the same driver a Ray job runs): a live table of the trials
goes to stderr, the summary JSON is the last line of stdout. Rerunning the same spec resumes it.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a job spec's hyperparameter sweep on Ray Tune, tracked in MLflow (local or RAY_ADDRESS)",
    )
    p.add_argument("spec", type=Path, help="the job spec, YAML or JSON (see examples/)")
    p.add_argument(
        "--job-id",
        default=None,
        help="experiment / parent-run name (default: <spec name>-<spec hash>, so a rerun resumes)",
    )
    p.add_argument("--attempt", type=int, default=1, help="attempt number recorded on the runs")
    p.add_argument(
        "--storage-path",
        default=None,
        help="Tune checkpoints: a folder or s3://... (default: $SMARTUNE_STORAGE_PATH or ~/.smartune/ray_results)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from worker.tune.sweep import main

    argv = ["--spec", str(args.spec), "--attempt", str(args.attempt)]
    if args.job_id:
        argv += ["--job-id", args.job_id]
    if args.storage_path:
        argv += ["--storage-path", args.storage_path]
    return main(argv)
