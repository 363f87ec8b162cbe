"""`smartune sweep SPEC`: run (or resume) a sweep locally: Ray Tune over the spec's grid, MLflow records.

A thin shell over `python -m worker.tune.sweep` (the same driver a Ray job runs): a live table of the trials
goes to stderr, the summary JSON is the last line of stdout. Rerunning the same spec resumes its
experiment, and says so loudly (trials that finished keep their results and do not run again);
`--fresh` starts a new experiment instead.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from cli.completion_cmd import FILE, completes


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a job spec's hyperparameter sweep on Ray Tune, tracked in MLflow (local or RAY_ADDRESS)",
    )
    completes(p.add_argument("spec", type=Path, help="the job spec, YAML or JSON (see examples/)"), FILE)
    p.add_argument(
        "--job-id",
        default=None,
        help="experiment / parent-run name (default: <spec name>-<spec hash>, so a rerun resumes)",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="start a new experiment even if this spec ran before (its job id gets a UTC time suffix)",
    )
    p.add_argument("--attempt", type=int, default=1, help="attempt number recorded on the runs")
    p.add_argument(
        "--storage-path",
        default=None,
        help="Tune checkpoints: a folder or s3://... (default: $SMARTUNE_STORAGE_PATH or ~/.smartune/ray_results)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from worker.contract.specfile import spec_from_file
    from worker.tune.settings import Settings
    from worker.tune.sweep import default_job_id, main

    argv = ["--spec", str(args.spec), "--attempt", str(args.attempt)]
    if args.storage_path:
        argv += ["--storage-path", args.storage_path]
    job_id = args.job_id
    if job_id is None or args.fresh:
        job_id = job_id or default_job_id(spec_from_file(args.spec))
    if args.fresh:
        job_id = f"{job_id}-{datetime.now(UTC):%Y%m%dT%H%M%S}"
    else:
        settings = Settings.from_env(storage_path=args.storage_path)
        if settings.has_experiment(job_id):
            print(_banner(job_id, settings.experiment_path(job_id)), file=sys.stderr, flush=True)
    return main([*argv, "--job-id", job_id])


def _banner(job_id: str, path: str) -> str:
    rule = "=" * 78
    return (
        f"{rule}\nsmartune sweep: this spec ran before as {job_id!r} ({path}).\n"
        "RESUMING that experiment: trials that finished keep their earlier results and do not run again.\n"
        f"Pass --fresh to start a new experiment instead.\n{rule}"
    )
