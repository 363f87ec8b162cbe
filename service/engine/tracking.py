"""Reading a job's sweep back from MLflow: trial rows, the summary, and ending runs (docs/architecture.md §2).

The sweep driver writes one parent run per job (`smartune.kind=sweep`) and one child run per trial, all
tagged `smartune.job_id`; the control plane only reads them, except that cancelling a job ends its open
runs as KILLED (and a failed job's as FAILED, so no run stays RUNNING forever). `Tracker` is the protocol
the engine uses; `MlflowTracker` implements it with `MlflowClient`, imported lazily.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from service.engine import run_files
from service.engine.registered_models import TeamModel, team_models
from service.engine.run_files import TrialOutput
from service.series import Series, clean, downsample
from worker.contract.tags import ATTEMPT, CELL, ERROR_CLASS, JOB, PARENT, PROVENANCE_PREFIX, STATE, TRIAL

logger = logging.getLogger(__name__)

OPEN_RUN_STATUSES = ("RUNNING", "SCHEDULED")


@dataclass
class TrialRun:
    trial_id: str
    run_id: str
    attempt: int
    state: str
    error_class: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    best_score: float | None = None
    last_epoch: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    wall_s: float | None = None  # the run's start to its end (or to now while it is open), seconds
    # What ran where, from the run's provenance tags (service.costs.refresh measures its cost by them).
    config: dict[str, Any] | None = None  # the whole TrainConfig (`smartune.prov.config`)
    device: str | None = None  # "cpu", or the GPU's name
    threads: int | None = None
    workers: int | None = None


@dataclass
class JobRuns:
    experiment_id: str | None
    parent_run_id: str | None
    trials: list[TrialRun]


# Per trial id, per metric key: the metric's history (step = epoch), downsampled to the caller's max_points.
Curves = dict[str, dict[str, Series]]
FINAL_RUN_STATUSES = ("FINISHED", "FAILED", "KILLED")
MAX_CACHED_HISTORIES = 200_000  # (run, metric) histories kept; a run's are re-read only when it moved on
SEED = "seed"  # the run param (worker.tune.tracking.flat_params) holding the trial's seed


class Tracker(Protocol):
    """A job's runs live in its team's experiment (`experiment`; None = the deployment's default one)."""

    def ensure_experiment(self, experiment: str | None = None) -> str | None: ...

    def job_runs(self, job_id: str, experiment: str | None = None) -> JobRuns: ...

    def summary(self, job_id: str, experiment: str | None = None) -> dict[str, Any] | None: ...

    def end_runs(self, job_id: str, status: str, experiment: str | None = None) -> int:
        """End the job's open runs with `status` (KILLED / FAILED); return how many."""
        ...

    def curves(
        self, job_id: str, keys: Sequence[str], max_points: int, experiment: str | None = None
    ) -> Curves:
        """The history of each of `keys` for the latest run of every trial of the job, each series at
        most `max_points` long (service.series.downsample); a trial lacks the keys it never logged."""
        ...

    def models(self, team: str) -> list[TeamModel]:
        """The team's registered models, one per task (service.engine.registered_models)."""
        ...

    def trial_output(
        self, job_id: str, trial_id: str, max_bytes: int, experiment: str | None = None
    ) -> TrialOutput | None:
        """What the trial printed (its latest run's kept output, service.engine.run_files); None when the
        trial has no run."""
        ...

    def download_checkpoint(
        self, job_id: str, trial_id: str, dst: Path, experiment: str | None = None
    ) -> Path | None:
        """The trial's best checkpoint (a Hugging Face folder) downloaded into `dst`; None without one."""
        ...

    def download_model(self, name: str, version: str, dst: Path) -> Path:
        """Version `version` of the registered model `name`, its files downloaded into `dst`."""
        ...


def run_url(ui_url: str | None, experiment_id: str | None, run_id: str | None) -> str | None:
    if not (ui_url and experiment_id and run_id):
        return None
    return f"{ui_url.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


def _int(value: str | None, default: int = 0) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def _wall_s(info: Any) -> float | None:
    """Seconds from the run's start to its end, or to now while it is open (MLflow keeps milliseconds)."""
    if not info.start_time:
        return None
    if info.end_time:
        end = info.end_time
    elif info.status in OPEN_RUN_STATUSES:
        end = time.time() * 1000
    else:
        return None
    return max(0.0, float(end - info.start_time) / 1000)


def _json_dict(text: str | None) -> dict[str, Any] | None:
    try:
        value = json.loads(text) if text else None
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _device(tags: dict[str, str]) -> str | None:
    """`cpu`, or the GPU's name: the calibration's device kind."""
    device = tags.get(f"{PROVENANCE_PREFIX}device")
    if device is None:
        return None
    return "cpu" if device.startswith("cpu") else tags.get(f"{PROVENANCE_PREFIX}device_name", device)


class MlflowTracker:
    """`Tracker` over an MLflow tracking store (the embedded SQLite one, or a server)."""

    def __init__(self, tracking_uri: str, experiment: str, artifact_root: str | None = None) -> None:
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        self.tracking_uri, self.experiment, self.artifact_root = tracking_uri, experiment, artifact_root
        self._client: Any = None
        self._experiment_ids: dict[str, str] = {}
        self._best: dict[str, tuple[int | None, float | None]] = {}  # run id -> (epoch seen, best score)
        # (run id, key) -> (what the run looked like when read, the full cleaned history)
        self._histories: dict[tuple[str, str], tuple[tuple[Any, ...], Series]] = {}

    @property
    def client(self) -> Any:
        if self._client is None:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(self.tracking_uri)
        return self._client

    def ensure_experiment(self, experiment: str | None = None) -> str | None:
        """The experiment's id, created (with the configured artifact folder) when it is missing."""
        name = experiment or self.experiment
        if name not in self._experiment_ids:
            found = self.client.get_experiment_by_name(name)
            if found is not None:
                self._experiment_ids[name] = str(found.experiment_id)
            else:
                location = Path(self.artifact_root).as_uri() if self.artifact_root else None
                self._experiment_ids[name] = str(self.client.create_experiment(name, location))
        return self._experiment_ids[name]

    def _runs(self, job_id: str, experiment: str | None) -> list[Any]:
        experiment_id = self.ensure_experiment(experiment)
        safe = job_id.replace("'", "")
        return list(
            self.client.search_runs(
                [experiment_id], filter_string=f"tags.`{JOB}` = '{safe}'", max_results=5000
            )
        )

    def _parent(self, runs: list[Any]) -> Any | None:
        parents = [r for r in runs if PARENT not in r.data.tags]
        return max(
            parents,
            key=lambda r: (_int(r.data.tags.get(ATTEMPT)), r.info.start_time or 0),
            default=None,
        )

    def job_runs(self, job_id: str, experiment: str | None = None) -> JobRuns:
        runs = self._runs(job_id, experiment)
        parent = self._parent(runs)
        trials = [self._trial(run) for run in self._latest_trial_runs(runs).values()]
        return JobRuns(
            experiment_id=self.ensure_experiment(experiment),
            parent_run_id=parent.info.run_id if parent is not None else None,
            trials=sorted(trials, key=lambda t: t.trial_id),
        )

    @staticmethod
    def _latest_trial_runs(runs: list[Any]) -> dict[str, Any]:
        """Trial id -> its run of the latest attempt (a requeued job's trials run again as new runs)."""
        latest: dict[str, Any] = {}
        for run in runs:
            tags = run.data.tags
            if PARENT not in tags or TRIAL not in tags:
                continue
            key = (_int(tags.get(ATTEMPT)), run.info.start_time or 0)
            trial_id = tags[TRIAL]
            current = latest.get(trial_id)
            if current is None or key > (
                _int(current.data.tags.get(ATTEMPT)),
                current.info.start_time or 0,
            ):
                latest[trial_id] = run
        return latest

    def curves(
        self, job_id: str, keys: Sequence[str], max_points: int, experiment: str | None = None
    ) -> Curves:
        """One search for the job's runs, then `get_metric_history` per run and key, cached: a finished
        run's history never changes, a running one's is read again once it logged another epoch."""
        out: Curves = {}
        for trial_id, run in self._latest_trial_runs(self._runs(job_id, experiment)).items():
            logged = run.data.metrics
            out[trial_id] = {
                key: downsample(self._history(run, key), max_points) for key in keys if key in logged
            }
        return out

    def _history(self, run: Any, key: str) -> Series:
        run_id, metrics = run.info.run_id, run.data.metrics
        # What changes whenever the run logs another point of `key`: its status, epoch and latest value.
        seen = (run.info.status, metrics.get("epoch"), metrics.get(key))
        cached = self._histories.get((run_id, key))
        if cached is not None and (cached[0] == seen or cached[0][0] in FINAL_RUN_STATUSES):
            return cached[1]
        history = self.client.get_metric_history(run_id, key)
        series = clean((int(m.step), float(m.value), int(m.timestamp)) for m in history)
        if len(self._histories) >= MAX_CACHED_HISTORIES:
            self._histories.clear()
        self._histories[(run_id, key)] = (seen, series)
        return series

    def _trial(self, run: Any) -> TrialRun:
        tags, metrics = run.data.tags, dict(run.data.metrics)
        epoch = int(metrics["epoch"]) if "epoch" in metrics else None
        seen_epoch, best = self._best.get(run.info.run_id, (None, None))
        if "score" in metrics and (best is None or epoch != seen_epoch):
            history = self.client.get_metric_history(run.info.run_id, "score")
            best = max((m.value for m in history), default=None)
            self._best[run.info.run_id] = (epoch, best)
        try:
            params = json.loads(tags.get(CELL, "{}"))
        except json.JSONDecodeError:
            params = {}
        params = params if isinstance(params, dict) else {"cell": params}
        # The cell tag leaves the seed out (it names the cell); the run's params hold the resolved config,
        # its seed among them: without it two seeds of one cell would read as the same trial.
        seed = _int(run.data.params.get(SEED), -1)
        if seed >= 0:
            params["seed"] = seed
        return TrialRun(
            trial_id=tags[TRIAL],
            run_id=run.info.run_id,
            attempt=_int(tags.get(ATTEMPT)),
            state=tags.get(STATE, "PENDING"),
            error_class=tags.get(ERROR_CLASS),
            params=params,
            best_score=best,
            last_epoch=epoch,
            metrics=metrics,
            wall_s=_wall_s(run.info),
            config=_json_dict(tags.get(f"{PROVENANCE_PREFIX}config")),
            device=_device(tags),
            threads=_int(tags.get(f"{PROVENANCE_PREFIX}torch_threads"), 0) or None,
            workers=_int(tags.get(f"{PROVENANCE_PREFIX}workers"), 0) or None,
        )

    def summary(self, job_id: str, experiment: str | None = None) -> dict[str, Any] | None:
        parent = self._parent(self._runs(job_id, experiment))
        if parent is None:
            return None
        with tempfile.TemporaryDirectory() as tmp:
            try:
                path = self.client.download_artifacts(parent.info.run_id, "summary.json", tmp)
            except Exception:  # no such artifact (yet)
                return None
            loaded = json.loads(Path(path).read_text())
        return loaded if isinstance(loaded, dict) else None

    def models(self, team: str) -> list[TeamModel]:
        return team_models(self.client, team)

    def _trial_run(self, job_id: str, trial_id: str, experiment: str | None) -> Any | None:
        return self._latest_trial_runs(self._runs(job_id, experiment)).get(trial_id)

    def trial_output(
        self, job_id: str, trial_id: str, max_bytes: int, experiment: str | None = None
    ) -> TrialOutput | None:
        run = self._trial_run(job_id, trial_id, experiment)
        return run_files.trial_output(self.client, run, max_bytes) if run is not None else None

    def download_checkpoint(
        self, job_id: str, trial_id: str, dst: Path, experiment: str | None = None
    ) -> Path | None:
        run = self._trial_run(job_id, trial_id, experiment)
        return run_files.download_checkpoint(self.client, run, dst) if run is not None else None

    def download_model(self, name: str, version: str, dst: Path) -> Path:
        return run_files.download_model(self.client, self.tracking_uri, name, version, dst)

    def end_runs(self, job_id: str, status: str, experiment: str | None = None) -> int:
        ended = 0
        for run in self._runs(job_id, experiment):
            if run.info.status in OPEN_RUN_STATUSES:
                self.client.set_terminated(run.info.run_id, status=status)
                ended += 1
        return ended
