"""Reproducibility audits: re-run a recorded trial from its MLflow run alone and compare, epoch by epoch.

What a trial recorded (worker.tune.run_tags): its whole config (`smartune.prov.config`), seed, code version,
library versions, device, torch threads, determinism, the SHA-256 of its data files (and the digest of the
uploaded dataset it read, if any) and of its initial weights, and per epoch its metrics. An audit checks the data and the initial model against their digests
first (the model's source files, not its seeded initial weights, which follow from the config): if either
differs, or the recorded device type is not available, the verdict is NOT-COMPARABLE with the reason, and
nothing is compared. Otherwise it trains the same config (recorded threads re-applied,
deterministic algorithms as recorded) up to the last recorded epoch and compares every per-epoch metric
but wall-clock ones: exactly on a CPU in deterministic mode, else within the tolerance the caller states.
The report lists each metric recorded vs re-run and each provenance field recorded vs now (drift), with
a verdict PASS or FAIL and why. `python -m worker.tune.audit` is the Ray job's entrypoint; its last line
of stdout is the report as JSON; the report is also logged on the job's parent run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from mlflow import MlflowClient

from worker.contract.errors import UserFunctionError
from worker.contract.tags import JOB, KIND, PARENT, PROVENANCE_PREFIX
from worker.contract.tasks import get_task
from worker.contract.trial import TrainConfig, recorded_values
from worker.training.files import DataError
from worker.training.finetune import RunCallbacks, run_training
from worker.training.models import model_digest, source_digest
from worker.training.parallel import data_parallel
from worker.training.provenance import dataset_provenance, environment, files_digest
from worker.training.session import TrainingSession
from worker.training.trial_data import data_files
from worker.tune.epoch_report import epoch_metrics
from worker.tune.process_exit import exit_at_once

Verdict = Literal["PASS", "FAIL", "NOT-COMPARABLE"]
WALL_CLOCK = frozenset({"train_seconds", "examples_per_s", "epoch"})  # differ run to run by nature
AUDIT_TAG_PREFIX = "smartune.audit."  # + audit id, on the parent run: the verdict
DEFAULT_GPU_TOLERANCE = 1e-3  # absolute, per metric, when a GPU trial's audit states none


class AuditError(ValueError):
    """The run cannot be audited at all (not a trial run, recorded before configs were recorded, ...)."""


@dataclass
class RecordedTrial:
    run_id: str
    parent_run_id: str | None
    config: TrainConfig
    provenance: dict[str, str]  # the `smartune.prov.*` tags, without the prefix
    history: dict[int, dict[str, float]]  # epoch (1-based) -> metric -> value, as logged

    @property
    def epochs(self) -> int:
        return max(self.history, default=0)


class _Stop(Exception):
    """Ends the re-run after the last epoch the trial recorded (a trial ASHA stopped early)."""


def recorded_trial(client: MlflowClient, run_id: str) -> RecordedTrial:
    run = client.get_run(run_id)
    tags = run.data.tags
    provenance = {k[len(PROVENANCE_PREFIX) :]: v for k, v in tags.items() if k.startswith(PROVENANCE_PREFIX)}
    if "config" not in provenance:
        raise AuditError(
            f"run {run_id} records no config (smartune.prov.config): not a trial run, or recorded before audits"
        )
    config = TrainConfig.from_dict(recorded_values(json.loads(provenance["config"])))  # as it ran
    reported = set(json.loads(provenance.get("function_metrics", "[]")))  # a custom function's own names
    keys = [
        k
        for k in run.data.metrics
        if k.startswith(("score", "best_score", "train_", "eval_")) or k in reported
    ]
    history: dict[int, dict[str, float]] = {}
    for key in keys:
        if key in WALL_CLOCK:
            continue
        for metric in client.get_metric_history(run_id, key):
            if metric.step >= 1:
                history.setdefault(int(metric.step), {})[key] = float(metric.value)
    return RecordedTrial(run_id, tags.get(PARENT), config, provenance, history)


def _device_problem(recorded: Mapping[str, str]) -> str | None:
    device = recorded.get("device", "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        return (
            f"device: the trial ran on {device} ({recorded.get('device_name', '?')}); no GPU is visible here"
        )
    return None


def _model_problem(config: TrainConfig, recorded: Mapping[str, str]) -> str | None:
    then = recorded.get("model_source_sha256")
    now = source_digest(config.model)
    if now != then:
        return f"model: {config.model!r} now has sha256 {now}, the trial recorded {then}"
    return None


def _data_problem(config: TrainConfig, recorded: Mapping[str, str]) -> str | None:
    dataset = dataset_provenance(config.data).get("dataset_sha256")
    if dataset != recorded.get("dataset_sha256"):  # an uploaded dataset is compared by its digest first
        return (
            f"data: the re-run reads dataset {dataset}, the trial recorded {recorded.get('dataset_sha256')}"
        )
    try:
        files = data_files(config, get_task(config.task))  # an uploaded dataset: fetched and verified
    except DataError as err:
        return f"data: {err}"
    if not files:
        return "data: the trial read a hub dataset, which has no file digest to check"
    missing = [str(p) for p in files if not p.exists()]
    if missing:
        return f"data: {', '.join(missing)} no longer exist(s)"
    now, then = files_digest(files), recorded.get("data_sha256")
    if now != then:
        return f"data: the files' sha256 is now {now}, the trial recorded {then}"
    return None


def compare(
    recorded: dict[int, dict[str, float]], rerun: dict[int, dict[str, float]], tolerance: float
) -> list[dict[str, Any]]:
    """One row per (epoch, metric) the trial recorded: both values, and whether they agree."""
    rows = []
    for epoch in sorted(recorded):
        for name, value in sorted(recorded[epoch].items()):
            again = rerun.get(epoch, {}).get(name)
            same = again is not None and (
                value == again or (math.isnan(value) and math.isnan(again)) or abs(value - again) <= tolerance
            )
            rows.append({"epoch": epoch, "metric": name, "recorded": value, "rerun": again, "match": same})
    return rows


def provenance_drift(recorded: Mapping[str, str], now: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each environment field (versions, device, threads, code) recorded vs now."""
    return [
        {
            "field": key,
            "recorded": recorded.get(key),
            "now": str(value),
            "same": recorded.get(key) == str(value),
        }
        for key, value in sorted(now.items())
    ]


def _rerun_config(trial: RecordedTrial) -> TrainConfig:
    """The recorded config on the recorded device type, with the recorded thread count when it set none."""
    device = "cuda" if trial.provenance.get("device", "cpu").startswith("cuda") else "cpu"
    threads = trial.config.num_threads
    if threads is None and trial.provenance.get("torch_threads", "").isdigit():
        threads = int(trial.provenance["torch_threads"]) * trial.config.workers
    return dataclasses.replace(trial.config, device=device, num_threads=threads)


def audit_trial(trial: RecordedTrial, tolerance: float | None = None) -> dict[str, Any]:
    """The audit report of one recorded trial (see the module's docstring)."""
    config = _rerun_config(trial)
    exact = config.device == "cpu" and config.deterministic
    tol = (
        0.0
        if exact and tolerance is None
        else (tolerance if tolerance is not None else DEFAULT_GPU_TOLERANCE)
    )
    report: dict[str, Any] = {
        "run_id": trial.run_id,
        "epochs": trial.epochs,
        "tolerance": tol,
        "exact": tol == 0,
    }
    if "function" in trial.provenance:  # a custom function's trial: its own re-run (no model, no data files)
        return _audit_function(trial, config, report, tol)
    problem = (
        _device_problem(trial.provenance)
        or _model_problem(config, trial.provenance)
        or _data_problem(config, trial.provenance)
    )
    if problem is None and not trial.history:
        problem = "metrics: the trial recorded no finished epoch"
    if problem is not None:
        return report | {"verdict": "NOT-COMPARABLE", "reason": problem, "metrics": [], "provenance": []}
    rerun: dict[int, dict[str, float]] = {}
    with data_parallel(config) as ranks:
        session = TrainingSession.build(config, ranks)
        # The initial weights follow from the checked source, the config and the code: a difference is a
        # finding of the audit (e.g. another seed), reported with the environment, not a reason to stop.
        now = environment(session.device, config.deterministic)
        now |= {"seed": config.seed, "initial_model_sha256": model_digest(session.model)}
        now |= dataset_provenance(config.data)
        now |= {k: v for k, v in session.rows.items() if k in trial.provenance}  # rows, where recorded
        drift = provenance_drift(trial.provenance, now)
        best: dict[str, Any] | None = None  # the epoch chosen so far

        def on_epoch_end(session: TrainingSession, record: dict[str, Any], is_best: bool) -> None:
            nonlocal best
            chosen = best = record if is_best or best is None else best
            rerun[record["epoch"]] = epoch_metrics(record, session.task.main_metric, chosen)
            if record["epoch"] >= trial.epochs:
                raise _Stop

        try:
            run_training(config, None, RunCallbacks(on_epoch_end=on_epoch_end), session)
        except _Stop:
            pass
    return report | _verdict(trial, rerun, tol, drift)


def _audit_function(
    trial: RecordedTrial, config: TrainConfig, report: dict[str, Any], tol: float
) -> dict[str, Any]:
    """A function trial's audit: the same values into the same function (its module's source unchanged),
    every metric it reported compared epoch by epoch. Not importable, or failing, is NOT-COMPARABLE."""
    from worker.tune.function_trial import audit_problem, rerun_function

    problem = _device_problem(trial.provenance) or audit_problem(trial.provenance)
    if problem is None and not trial.history:
        problem = "metrics: the trial recorded no finished epoch"
    if problem is None:
        try:
            rerun = rerun_function(trial.provenance, config)
        except UserFunctionError as err:
            problem = f"function: the re-run failed: {err}"
    if problem is not None:
        return report | {"verdict": "NOT-COMPARABLE", "reason": problem, "metrics": [], "provenance": []}
    now = environment(torch.device(config.device), config.deterministic) | {"seed": config.seed}
    return report | _verdict(trial, rerun, tol, provenance_drift(trial.provenance, now))


def _verdict(
    trial: RecordedTrial, rerun: dict[int, dict[str, float]], tol: float, drift: list[dict[str, Any]]
) -> dict[str, Any]:
    """The comparison's verdict, its one-line reason, its rows and the environment's drift."""
    rows = compare(trial.history, rerun, tol)
    differing = [r for r in rows if not r["match"]]
    verdict: Verdict = "FAIL" if differing else "PASS"
    if differing:
        first = differing[0]
        reason = (
            f"{first['metric']} at epoch {first['epoch']}: recorded {first['recorded']!r}, re-run {first['rerun']!r}"
            + (f" (and {len(differing) - 1} more)" if len(differing) > 1 else "")
        )
    else:
        reason = f"{len(rows)} metric values over {trial.epochs} epoch(s) match" + (
            " exactly" if tol == 0 else ""
        )
    changed = [d["field"] for d in drift if not d["same"]]
    if changed:
        reason += f"; the environment differs in {', '.join(changed)}"
    return {"verdict": verdict, "reason": reason, "metrics": rows, "provenance": drift}


def best_trial_run(client: MlflowClient, job_id: str) -> str:
    """The run id of the job's best trial (highest `best_score`), what an audit re-runs by default."""
    runs = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        f"tags.`{JOB}` = '{job_id}'",
    )
    trials = [r for r in runs if r.data.tags.get(KIND) != "sweep" and "best_score" in r.data.metrics]
    if not trials:
        raise AuditError(f"job {job_id} has no trial with a finished epoch to audit")
    best: str = max(trials, key=lambda r: r.data.metrics["best_score"]).info.run_id
    return best


def log_audit(client: MlflowClient, parent_run_id: str, audit_id: str, reports: list[dict[str, Any]]) -> None:
    """The reports as `audits/<audit id>.json` on the parent run, the overall verdict as a tag."""
    client.log_dict(parent_run_id, {"audit_id": audit_id, "trials": reports}, f"audits/{audit_id}.json")
    client.set_tag(parent_run_id, f"{AUDIT_TAG_PREFIX}{audit_id}", overall_verdict(reports))


def overall_verdict(reports: Sequence[Mapping[str, Any]]) -> Verdict:
    verdicts = {r["verdict"] for r in reports}
    return "FAIL" if "FAIL" in verdicts else "NOT-COMPARABLE" if "NOT-COMPARABLE" in verdicts else "PASS"


def main(argv: Sequence[str] | None = None) -> int:
    from worker.tune.settings import Settings

    parser = argparse.ArgumentParser(prog="python -m worker.tune.audit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--job-id", help="the audited job: its best trial unless --run-id names trials")
    parser.add_argument("--run-id", action="append", default=[], help="a trial run to re-run (repeatable)")
    parser.add_argument(
        "--audit-id", default=None, help="log the report on the job's parent run under this id"
    )
    parser.add_argument(
        "--tolerance", type=float, default=None, help="absolute, per metric (default: exact on CPU)"
    )
    args = parser.parse_args(argv)
    client = MlflowClient(Settings.from_env().tracking_uri)
    try:
        run_ids = args.run_id or ([best_trial_run(client, args.job_id)] if args.job_id else [])
        if not run_ids:
            parser.error("name a --job-id or at least one --run-id")
        trials = [recorded_trial(client, run_id) for run_id in run_ids]
    except AuditError as err:
        print(f"audit: {err}", file=sys.stderr)
        return 2
    reports = [audit_trial(trial, args.tolerance) for trial in trials]
    if args.audit_id and trials[0].parent_run_id:
        log_audit(client, trials[0].parent_run_id, args.audit_id, reports)
    # The last line: what the control plane reads back as the audit job's summary (`job_id` marks it).
    report = {"job_id": args.audit_id, "audit_of": args.job_id, "verdict": overall_verdict(reports)}
    print(json.dumps(report | {"trials": reports}, default=str))
    return 0


if __name__ == "__main__":
    exit_at_once(main())
