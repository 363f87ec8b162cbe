"""A sweep driver whose trials sleep instead of train: the replay's stand-in for worker.tune.sweep.

`python -m research.pool_replay.sleep_sweep --job-id JOB --attempt N` keeps the driver's contract with the
control plane (docs/architecture.md §2-3), so `smartune serve` runs it unchanged when
`SMARTUNE_SWEEP_MODULE=research.pool_replay.sleep_sweep`:
- in: the spec's canonical JSON in `SMARTUNE_JOB_SPEC`, validated by the same `JobSpec`; the MLflow store,
  experiment and Tune storage from the environment the dispatcher sets (worker.tune.settings);
- Tune: one `grid_search` over the spec's trials (in `JobSpec.trials()` order), each asking the spec's
  `resources.cpus` and `resources.gpus` (the fraction as given: no memory packing), at most
  `limits.max_concurrent_trials` at once, actors reused as the real driver does;
- a trial sleeps its `max_train_samples` read as tenths of a second (research/pool_replay/workload.py);
- MLflow: the parent run (worker.tune.tracking.open_parent), one child run per trial tagged with the
  job, trial, attempt, state and cell, opened RUNNING when Tune starts the trial and ended TERMINATED
  (or ERROR) when it ends, with the metrics `sleep_start` / `sleep_end` (the trial's own clock) and
  `tune_start` / `tune_end` (the driver's, when Tune started and completed it), epoch seconds; at the end
  `summary.json` on the parent run and the summary as the last line of stdout.
Exit codes as the real driver: 0 with at least one completed trial, 3 with none, 2 for a bad spec.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

DECI = 10  # tenths of a second per unit of `max_train_samples`
NO_RESULT = 3
logger = logging.getLogger("smartune.sleep_sweep")


def sleep_plan(trials: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The grid's values: per trial its index, its cell (what the service shows) and its sleep."""
    return [
        {
            "index": i,
            "max_train_samples": int(t["max_train_samples"]),
            "sleep_s": t["max_train_samples"] / DECI,
        }
        for i, t in enumerate(trials)
    ]


def summary_of(job_id: str, finals: Mapping[str, str], errors: Mapping[str, str]) -> dict[str, Any]:
    """The sweep summary the service reads (worker.contract.outcome): trials by state, best, errors."""
    by_state: dict[str, int] = {}
    for state in finals.values():
        by_state[state] = by_state.get(state, 0) + 1
    done = sorted(t for t, s in finals.items() if s == "TERMINATED")
    best = {"trial_id": done[0], "value": 1.0} if done else None
    return {
        "job_id": job_id,
        "main_metric": "score",
        "trials": len(finals),
        "trials_by_state": by_state,
        "best": best,
        "errors": [{"trial_id": t, "error_class": "other", "error": e} for t, e in sorted(errors.items())],
    }


def _recorder(target: Any, parent_id: str, attempt: int) -> Any:
    """The Tune callback that keeps each trial's MLflow run (built lazily: Tune and MLflow are heavy)."""
    from ray import tune

    from worker.contract.tags import ATTEMPT, CELL
    from worker.tune.tracking import finish_trial_run, log_metrics, open_trial_run

    class RunRecorder(tune.Callback):
        def __init__(self) -> None:
            self.client = target.client()
            self.runs: dict[str, str] = {}
            self.started: dict[str, float] = {}
            self.finals: dict[str, str] = {}
            self.errors: dict[str, str] = {}

        def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self.started[trial.trial_id] = time.time()
            cell = {"max_train_samples": trial.config["trial"]["max_train_samples"]}
            run = open_trial_run(
                self.client, target, trial_id=trial.trial_id, parent_run_id=parent_id,
                run_name=f"{target.job_id}-{trial.config['trial']['index']}",
                tags={ATTEMPT: attempt, CELL: json.dumps(cell)},
                params={k: str(v) for k, v in trial.config["trial"].items()},
            )  # fmt: skip
            self.runs[trial.trial_id] = run.info.run_id

        def _end(self, trial: Any, state: str, error: str | None = None) -> None:
            run_id = self.runs.get(trial.trial_id)
            if run_id is None:
                return
            result = {
                k: v
                for k, v in (trial.last_result or {}).items()
                if k in ("sleep_start", "sleep_end", "score")
            }
            times = {"tune_start": self.started.get(trial.trial_id, time.time()), "tune_end": time.time()}
            log_metrics(self.client, run_id, {**result, **times}, step=1)
            finish_trial_run(self.client, run_id, state, "other" if error else None, error)  # type: ignore[arg-type]
            self.finals[trial.trial_id] = state
            if error:
                self.errors[trial.trial_id] = error

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self._end(trial, "TERMINATED")

        def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self._end(trial, "ERROR", f"trial {trial.trial_id} failed")

    return RunRecorder()


def run(spec: Any, job_id: str, attempt: int) -> dict[str, Any]:
    """Run the sleeping sweep of `spec` (a validated JobSpec) on Ray; return its summary."""
    import ray
    from ray import tune

    from research.pool_replay.sleeper import sleep_trial
    from worker.tune.placement import trial_resources
    from worker.tune.settings import Settings
    from worker.tune.tracking import TrackingTarget, ensure_experiment, open_parent

    settings = Settings.from_env()
    settings.prepare()
    client = TrackingTarget(settings.tracking_uri, "", job_id).client()
    experiment_id = ensure_experiment(client, settings.experiment, settings.artifact_root)
    target = TrackingTarget(settings.tracking_uri, experiment_id, job_id)
    plan = sleep_plan(spec.trials())
    parent_id = open_parent(
        client, target, attempt, spec.spec_hash(), spec.canonical_json(), {"trials": str(len(plan))}
    )
    recorder = _recorder(target, parent_id, attempt)
    if not ray.is_initialized():
        # The Ray job's cluster (RAY_ADDRESS); without it a fresh local one, never another found here.
        ray.init(
            address=os.environ.get("RAY_ADDRESS") or "local", include_dashboard=False, log_to_driver=False
        )
    request = {"cpu": spec.resources.cpus, "gpu": spec.resources.gpus}
    trainable = tune.with_resources(sleep_trial, trial_resources(request, settings.placement))
    tuner = tune.Tuner(
        trainable,
        param_space={"trial": tune.grid_search(plan)},
        tune_config=tune.TuneConfig(
            max_concurrent_trials=spec.limits.max_concurrent_trials, reuse_actors=True
        ),
        run_config=tune.RunConfig(
            name=job_id,
            storage_path=settings.storage_path,
            failure_config=tune.FailureConfig(max_failures=spec.limits.max_retries),
            callbacks=[recorder],
            verbose=0,
        ),
    )
    tuner.fit()
    summary = summary_of(job_id, recorder.finals, recorder.errors)
    client.log_dict(parent_id, summary, "summary.json")
    client.set_terminated(parent_id, "FINISHED" if summary["best"] else "FAILED")
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.pool_replay.sleep_sweep", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--job-id", required=True)
    parser.add_argument("--attempt", type=int, default=1)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # no CSV/JSON/TensorBoard per trial
    from pydantic import ValidationError

    from worker.contract.spec import JobSpec

    try:
        spec = JobSpec.model_validate_json(os.environ.get("SMARTUNE_JOB_SPEC") or "null")
    except ValidationError as err:
        print(f"invalid job spec in SMARTUNE_JOB_SPEC: {err}", file=sys.stderr)
        return 2
    summary = run(spec, args.job_id, args.attempt)
    sys.stdout.flush()
    print(json.dumps(summary))
    return 0 if summary["best"] else NO_RESULT


if __name__ == "__main__":
    raise SystemExit(main())
