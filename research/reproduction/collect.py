"""Read the campaign's results from MLflow into records, and choose the grid's learning rate and epochs.

    python -m research.reproduction.collect --tracking-uri sqlite:///DATA/mlflow.db [--out research/results/paper_ablation.json]

The jobs are found on the server by name (`<campaign>/<task>/<part>`, $SMARTUNE_URL / $SMARTUNE_API_KEY);
each trial's record comes from its MLflow child run: params, the per-epoch dev metric (`score`, the task's
main GLUE metric) and per-epoch training seconds (`train_seconds`, evaluation excluded), and the
regulariser's per-epoch components (`train_*`).
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from research.reproduction.budget import ARM_SEP
from research.reproduction.plan import CAMPAIGN, METHOD_LABELS, RADIUS_LABELS, Campaign
from research.reproduction.records import FILE_ORDER, merge_into
from research.reproduction.selection import selected, subsets_label
from smartune import Client
from worker.contract.tags import JOB, PROVENANCE_PREFIX, TRIAL
from worker.contract.tasks import TASKS

OUT = Path(__file__).resolve().parents[1] / "results" / "paper_ablation.json"
GRID_OUT = OUT.with_name("reproduction_grid.json")


def campaign_jobs(client: Client, campaign: Campaign = CAMPAIGN) -> dict[str, dict[str, Any]]:
    """Job name -> the job (the newest of a name, as the idempotency key makes one per name)."""
    jobs: dict[str, dict[str, Any]] = {}
    for job in reversed(client.jobs()):  # oldest first: a newer job of the same name wins
        name = job.get("name") or ""
        if campaign.parse(name) and job["state"] != "FAILED":
            jobs[name] = client.job(str(job["id"]))  # the detail names the MLflow experiment
    return jobs


def _history(mlflow: Any, run_id: str, key: str) -> list[float]:
    points = sorted(mlflow.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
    by_step = {m.step: m.value for m in points}  # a resumed epoch logged twice: the later value
    return [by_step[s] for s in sorted(by_step)]


def trial_records(
    mlflow: Any, experiment_ids: list[str], task: str, part: str, job_id: str
) -> list[dict[str, Any]]:
    metric = TASKS[task].main_metric
    runs = mlflow.search_runs(experiment_ids, filter_string=f"tags.`{JOB}` = '{job_id}'", max_results=1000)
    out = []
    for run in runs:
        if TRIAL not in run.data.tags:
            continue  # the job's parent run
        # `score` is what chose (validation rows when the run held some out: `val_<metric>` then), dev is
        # `eval_<metric>`; a run logged before `eval_*` existed has only `score`, on dev
        dev = [100.0 * v for v in _history(mlflow, run.info.run_id, f"eval_{metric}")]
        held = [100.0 * v for v in _history(mlflow, run.info.run_id, f"val_{metric}")]
        curve = dev or [100.0 * v for v in _history(mlflow, run.info.run_id, "score")]
        seconds = _history(mlflow, run.info.run_id, "train_seconds")
        if not curve:
            continue
        params = run.data.params
        training = {k: params.get(k) for k in ("sampling", "fraction_seed")}
        training["max_train_samples"] = (
            None if params.get("max_train_samples") in (None, "None") else int(params["max_train_samples"])
        )
        training["validation_fraction"] = float(params.get("validation_fraction") or 0.0)
        components = {
            key.removeprefix("train_"): _history(mlflow, run.info.run_id, key)
            for key in run.data.metrics
            if key.startswith("train_") and key not in ("train_seconds", "train_loss")
        }
        out.append(
            {
                "task": task,
                "method": part,
                "seed": int(params["seed"]),
                "metric": metric,
                **selected(curve, held if held and len(held) == len(curve) else None),
                "validation_curve": held,
                "subsets": subsets_label(training) if "sampling" in params else FILE_ORDER,
                "train_rows_sha256": run.data.tags.get(f"{PROVENANCE_PREFIX}train_rows_sha256"),
                "epochs": len(curve),
                "wall_s": sum(seconds),
                "mlflow_run_id": run.info.run_id,
                "job_id": job_id,
                "state": run.data.tags.get("smartune.state"),
                "learning_rate": float(params["learning_rate"]),
                "planned_epochs": int(params["epochs"]),
                "curve": curve,
                "epoch_seconds": seconds,
                "train_loss": _history(mlflow, run.info.run_id, "train_loss"),
                "components": components,
            }
        )
    return sorted(out, key=lambda r: (r["learning_rate"], r["planned_epochs"], r["seed"]))


def collect(client: Client, tracking_uri: str, campaign: Campaign = CAMPAIGN) -> list[dict[str, Any]]:
    from mlflow import MlflowClient

    mlflow = MlflowClient(tracking_uri)
    records: list[dict[str, Any]] = []
    for name, job in sorted(campaign_jobs(client, campaign).items()):
        task, part = campaign.parse(name) or ("", "")
        if job.get("mlflow_experiment_id"):
            records += trial_records(mlflow, [str(job["mlflow_experiment_id"])], task, part, str(job["id"]))
    return records


def write(records: list[dict[str, Any]], out: Path, grid_out: Path) -> None:
    """The methods' records into `out` (the issue's format plus curves), the grid's into `grid_out`, each
    merged with the records already there (`records.merge_into`)."""

    def is_method(r: dict[str, Any]) -> bool:  # a method's row, or one of its equal-compute arms
        return r["method"].split(ARM_SEP)[0] in METHOD_LABELS + RADIUS_LABELS

    methods = [r for r in records if is_method(r) and r["state"] == "TERMINATED"]
    unfinished = sum(is_method(r) and r["state"] != "TERMINATED" for r in records)
    if unfinished:
        print(f"{unfinished} method trials not finished yet: left out")  # a running trial's best is partial
    grid = [r for r in records if not is_method(r)]
    for path, rows in ((out, methods), (grid_out, grid)):
        total = merge_into(path, rows)  # a new machine's store holds only its own trials: keep the others
        print(f"{len(rows)} trial records -> {path} ({total} in all)")


def choose(records: Iterable[dict[str, Any]], part: str = "grid-full") -> dict[str, Any]:
    """The (learning rate, epochs) cell of vanilla's grid with the best mean over tasks of the per-task
    mean over seeds of each trial's selection value (its validation rows' score at its chosen epoch; a
    record without validation rows: its best dev score). Only cells every grid task ran to their end count."""
    cells: dict[tuple[float, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r["method"] == part and r["epochs"] == r["planned_epochs"]:
            cells[(r["learning_rate"], r["planned_epochs"])][r["task"]].append(
                r.get("selection_value", r["value"])
            )
    tasks = set().union(*(c.keys() for c in cells.values())) if cells else set()
    scored = {
        cell: statistics.mean(statistics.mean(v) for v in by_task.values())
        for cell, by_task in cells.items()
        if set(by_task) == tasks
    }
    if not scored:
        raise LookupError(
            f"no finished {part} cells yet: run `python -m research.reproduction.run grid` first"
        )
    (lr, epochs), best = max(scored.items(), key=lambda kv: kv[1])
    table = ", ".join(f"lr {c[0]:g} x {c[1]} ep: {v:.2f}" for c, v in sorted(scored.items()))
    return {"learning_rate": lr, "epochs": epochs, "score": best, "tasks": sorted(tasks), "why": table}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.reproduction.collect", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--tracking-uri", required=True, help="the server's MLflow store")
    parser.add_argument("--out", type=Path, default=OUT, help="the methods' records")
    parser.add_argument("--grid-out", type=Path, default=GRID_OUT, help="the grid's records")
    args = parser.parse_args(argv)
    with Client() as client:
        records = collect(client, args.tracking_uri)
    write(records, args.out, args.grid_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
