"""The campaign's methods phase run directly, without the service: for a machine where Ray and MLflow are
not installed (a lent GPU), and to check the service's numbers against the bare training run.

    python -m research.reproduction.direct --out FILE.jsonl [--tasks rte,mrpc] [--device cuda]
        [--precision fp32] [--workers 6] [--deadline-s 400] [--model PATH] [--data DIR]
        [--train-examples 1000|full] [--learning-rate 5e-5 --epochs 10]
    python -m research.reproduction.direct --out FILE.jsonl --merge-into research/results/paper_ablation_h200.json
    python -m research.reproduction.direct --out radius.jsonl --tasks rte,mrpc,stsb --methods radius --device cuda
    python -m research.reproduction.direct --out linearized.jsonl --tasks stsb --methods linearized --device cuda \
        --precision bf16 --train-examples 1000 --learning-rate 5e-5 --epochs 10

Each trial is the service's own: the campaign's job spec (`plan.Campaign.method_spec`) expanded by the
contract (`JobSpec.trials`) into `TrainConfig`s and trained by `worker.training.finetune.run_training`,
as a sweep trial is, minus Tune and MLflow. Without `--learning-rate`/`--epochs` the grid's choice is
used (`collect.choose` over research/results/reproduction_grid.json). Trials run in priority order (task
by task, then seed by seed with every method inside a seed, so a run stopped at its deadline leaves
complete paired seeds) on `workers` processes. Each finished trial appends one record in `collect`'s
shape to the JSONL file; a rerun skips the trials already there.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import dataclasses
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from research.reproduction import plan
from research.reproduction.collect import choose
from research.reproduction.records import TrialKey, merge_into, trial_key
from research.reproduction.selection import selected, subsets_label

GRID = Path(__file__).resolve().parents[1] / "results" / "reproduction_grid.json"
PRIORITY = ("rte", "mrpc", "stsb", "cola", "sst2")  # Table 3's small tasks first: the paper's largest gains


def trial_configs(
    campaign: plan.Campaign,
    tasks: list[str],
    *,
    learning_rate: float | None,
    epochs: int | None,
    train_examples: int | None,
    overrides: dict[str, Any],
    grid: bool = False,
) -> list[dict[str, Any]]:
    """Every trial as a TrainConfig dict, in priority order, each tagged with its report row under
    `_method`: the methods phase at (`learning_rate`, `epochs`), or with `grid` the vanilla grid run in
    full (rows `grid-full`; learning rate x epochs x grid seeds, as `Campaign.grid_spec` has them)."""
    from worker.contract.spec import JobSpec  # pydantic: imported where it is used

    specs: list[tuple[str, dict[str, Any]]] = []
    for task in tasks:
        if grid:
            specs.append(("grid-full", campaign.grid_spec(task, asha=False)))
            continue
        if learning_rate is None or epochs is None:
            raise ValueError("the methods phase needs a learning rate and epochs")
        for method in campaign.methods:
            if not campaign.method_seeds(method):  # planned on none of the seeds asked for
                continue
            specs.append(
                (method.label, campaign.method_spec(task, method, learning_rate=learning_rate, epochs=epochs))
            )
    by_key: dict[TrialKey, dict[str, Any]] = {}
    for label, spec in specs:
        held = float(spec["training"].get("validation_fraction") or 0.0)
        # `train_examples` are the rows that train: the validation rows are drawn beside them
        spec["training"]["max_train_samples"] = (
            None if train_examples is None else round(train_examples / (1 - held))
        )
        for trial in JobSpec.model_validate(spec).trials():
            tagged = {**trial, **overrides, "_method": label}
            by_key[trial_key(tagged)] = tagged
    order = {t: i for i, t in enumerate(PRIORITY)}
    labels = ["grid-full", *(m.label for m in campaign.methods)]
    keys = sorted(by_key, key=lambda k: (order.get(k[0], len(order)), k[0], k[2], labels.index(k[1]), k[3:]))
    return [by_key[k] for k in keys]


def record(
    trial: dict[str, Any], result: dict[str, Any], device_name: str, concurrent_trials: int = 1
) -> dict[str, Any]:
    """One trial in `collect.trial_records`' shape, from run_training's metrics document;
    `concurrent_trials` is how many trials shared the device (its seconds are under that sharing)."""
    from worker.contract.tasks import get_task

    main = get_task(trial["task"]).main_metric
    epochs = result["epochs"]
    curve = [100.0 * float(e["metrics"][main]) for e in epochs]
    held = [100.0 * float(e["validation"][main]) for e in epochs if "validation" in e]
    keys = sorted({k for e in epochs for k in e["components"] if k != "loss"})
    provenance = result["provenance"]
    return {
        "task": trial["task"],
        "method": trial["_method"],
        "seed": int(trial["seed"]),
        "metric": main,
        **selected(curve, held if len(held) == len(curve) else None),
        "validation_curve": held,
        "subsets": subsets_label(trial),
        "train_rows_sha256": provenance.get("train_rows_sha256"),
        "epochs": len(curve),
        "wall_s": sum(float(e["train_seconds"]) for e in epochs),
        "mlflow_run_id": None,
        "job_id": None,
        "state": "TERMINATED",
        "learning_rate": float(trial["learning_rate"]),
        "planned_epochs": int(trial["epochs"]),
        "curve": curve,
        "epoch_seconds": [float(e["train_seconds"]) for e in epochs],
        "train_loss": [float(e["train_loss"]) for e in epochs],
        "components": {k: [float(e["components"].get(k, float("nan"))) for e in epochs] for k in keys},
        "source": "direct",
        "device": device_name,
        "precision": provenance.get("precision"),
        "train_examples": int(result["train_examples"]),
        "trial_wall_s": float(result["wall_seconds"]),
        "concurrent_trials": concurrent_trials,
    }


def run_one(trial: dict[str, Any], stop_at: float, workers: int = 1) -> dict[str, Any] | None:
    """Train one trial in this (pool) process; None when the deadline has passed before it starts."""
    if time.time() > stop_at:
        return None
    import torch

    from worker.contract.trial import TrainConfig
    from worker.training.finetune import run_training

    config = TrainConfig.from_dict({k: v for k, v in trial.items() if not k.startswith("_")})
    try:
        result = run_training(config, None)
    except Exception as err:  # one failed trial is a record, not the end of the run
        return {**_key(trial), "state": "ERROR", "error": f"{type(err).__name__}: {err}"}
    name = torch.cuda.get_device_name() if config.device.startswith("cuda") else "cpu"
    return record(trial, result, name, workers)


def _key(trial: dict[str, Any]) -> dict[str, Any]:
    """`trial_key` as a record's fields (an ERROR record has only these)."""
    return dict(
        zip(("task", "method", "seed", "learning_rate", "planned_epochs"), trial_key(trial), strict=True)
    )


def _rows(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file (none when it does not exist yet)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _done(path: Path) -> set[TrialKey]:
    return {trial_key(r) for r in _rows(path) if r.get("state") == "TERMINATED"}


def run(trials: list[dict[str, Any]], out: Path, workers: int, stop_at: float) -> int:
    """Train the trials not yet in `out` on `workers` processes; returns how many finished now."""
    done = _done(out)
    todo = [t for t in trials if trial_key(t) not in done]
    print(f"[direct] {len(todo)} trials to run ({len(trials) - len(todo)} already in {out})", file=sys.stderr)
    finished = 0
    context = multiprocessing.get_context("spawn")  # CUDA cannot be forked
    with futures.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool, out.open("a") as sink:
        pending = [pool.submit(run_one, t, stop_at, workers) for t in todo]
        for future in futures.as_completed(pending):
            row = future.result()
            if row is None:
                continue
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            finished += row.get("state") == "TERMINATED"
            value = (
                f"{row['value']:.2f} in {row['trial_wall_s']:.0f} s" if "value" in row else row.get("error")
            )
            print(f"[direct] {row['task']} {row['method']} seed {row['seed']}: {value}", file=sys.stderr)
    return finished


def merge(sources: list[Path], into: Path) -> int:
    """Fold the finished trials of JSONL `sources` into the JSON list `into` (the report's records), a
    newer record replacing one of the same trial (`trial_key`); returns how many records `into` has."""
    return merge_into(
        into, (row for source in sources for row in _rows(source) if row.get("state") == "TERMINATED")
    )


def table(path: Path) -> str:
    """Mean ± sd per task and method of the finished trials in `path` (for a terminal)."""
    rows = _rows(path)
    cells: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if r.get("state") == "TERMINATED":
            cells.setdefault((r["task"], r["method"]), []).append(r["value"])
    out = []
    for (task, method), values in sorted(cells.items()):
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        out.append(f"{task:6} {method:18} n={len(values)} {statistics.fmean(values):6.2f} ± {sd:.2f}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.reproduction.direct", description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="JSONL of trial records (appended)")
    parser.add_argument("--merge-into", type=Path, default=None,
                        help="train nothing: fold --out's records into this JSON list (the report's records)")  # fmt: skip
    parser.add_argument("--tasks", default=",".join(PRIORITY))
    parser.add_argument("--methods", default="",
                        help="report rows to run (default: the methods phase's); `radius`: the radius x lambda_s cells; "
                        "`linearized`: smart and smart-renorm exact and with R_s linearised (issue 28)")  # fmt: skip
    parser.add_argument(
        "--grid", action="store_true", help="run vanilla's grid in full instead of the methods"
    )
    parser.add_argument("--grid-epochs", default="", help="the grid's epochs axis (default: the campaign's)")
    parser.add_argument("--seeds", default="",
                        help="default: the campaign's (with --methods radius: each cell's planned seeds, of which "
                        "--seeds keeps those named)")  # fmt: skip
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--workers", type=int, default=1, help="trials at a time")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per trial")
    parser.add_argument("--deadline-s", type=float, default=0.0, help="start no trial after this (0: none)")
    parser.add_argument("--model", default=None, help="default: the campaign's (minilm-l6)")
    parser.add_argument("--data", default=None, help="GLUE folder (default: $SMARTUNE_GLUE_DIR)")
    parser.add_argument("--train-examples", default=str(plan.TRAIN_EXAMPLES),
                        help="N rows that train (the campaign's validation rows are drawn beside them), or 'full'")  # fmt: skip
    parser.add_argument("--eval-examples", type=int, default=None, help="the first N dev rows (default: all)")
    parser.add_argument("--learning-rate", type=float, default=None)
    parser.add_argument("--epochs", type=int, default=None)
    args = parser.parse_args(argv)
    if args.merge_into:
        print(f"{merge([args.out], args.merge_into)} records in {args.merge_into}")
        return 0
    narrowed: dict[str, Any] = {}
    if args.methods:
        wanted = set(args.methods.split(","))
        if "radius" in wanted and wanted != {"radius"}:
            parser.error("--methods: radius runs the radius table's own plan; name it alone")
        # `radius`: the radius x lambda_s cells with their baselines, each on its planned seeds
        radius = wanted == {"radius"}
        if radius:
            wanted = {m.label for m in plan.RADIUS_PLAN}
            narrowed["seeds"] = plan.RADIUS_PLAN_SEEDS
        if "linearized" in wanted:  # the linearised rows beside the exact ones (plan.LINEARIZED_METHODS)
            wanted = (wanted - {"linearized"}) | {*plan.LINEARIZED_BASELINES, *plan.LINEARIZED_LABELS}
        rows = plan.RADIUS_PLAN if radius else plan.ALL_METHODS
        narrowed["methods"] = tuple(m for m in rows if m.label in wanted)
        if unknown := wanted - {m.label for m in narrowed["methods"]}:
            parser.error(
                f"--methods: no such row {', '.join(sorted(unknown))} (see research.reproduction.plan)"
            )
    if args.seeds:
        narrowed["seeds"] = narrowed["grid_seeds"] = tuple(int(s) for s in args.seeds.split(","))
    if args.grid_epochs:
        narrowed["grid_epochs"] = tuple(int(e) for e in args.grid_epochs.split(","))
    campaign = dataclasses.replace(plan.CAMPAIGN, **narrowed)
    if not args.grid and (args.learning_rate is None or args.epochs is None):
        chosen = choose(json.loads(GRID.read_text()))
        args.learning_rate = args.learning_rate or chosen["learning_rate"]
        args.epochs = args.epochs or chosen["epochs"]
    from worker.contract.sources import default_data_source

    overrides: dict[str, Any] = {
        "device": args.device,
        "precision": args.precision,
        "num_threads": args.threads,
        "data": args.data or default_data_source(),
    }
    if args.model:
        overrides["model"] = args.model
    if args.eval_examples:
        overrides["max_eval_samples"] = args.eval_examples
    train_examples = None if args.train_examples == "full" else int(args.train_examples)
    trials = trial_configs(campaign, args.tasks.split(","), learning_rate=args.learning_rate,
                           epochs=args.epochs, train_examples=train_examples, overrides=overrides,
                           grid=args.grid)  # fmt: skip
    stop_at = time.time() + args.deadline_s if args.deadline_s > 0 else float("inf")
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS (the trials' default)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    run(trials, args.out, args.workers, stop_at)
    print(table(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
