"""In-memory stand-ins for Ray and MLflow with the same protocols as service.engine.ray_jobs / service.engine.tracking."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.engine.ray_jobs import RAY_FINAL, RayJobExists, RayJobInfo, RayUnavailable
from service.engine.registered_models import TeamModel
from service.engine.run_files import TrialOutput
from service.engine.scheduler import Resources
from service.engine.tracking import Curves, JobRuns, TrialRun
from service.series import Series, downsample


@dataclass
class FakeRayJob:
    submission_id: str
    entrypoint: str
    env_vars: dict[str, str]
    metadata: dict[str, str]
    status: str = "PENDING"
    message: str | None = None
    logs: str = ""


@dataclass
class FakeRay:
    """A Ray cluster in a dict. `down = True` makes every call fail as unreachable."""

    cpus: float = 8.0
    gpus: float = 2.0
    jobs: dict[str, FakeRayJob] = field(default_factory=dict)
    submissions: list[str] = field(default_factory=list)  # every accepted submit, in order
    stopped: list[str] = field(default_factory=list)
    stop_calls: list[str] = field(default_factory=list)  # every stop asked for, known to Ray or not
    down: bool = False
    odd: set[str] = field(default_factory=set)  # submission ids whose every call raises an unexpected error
    reserved: dict[str, tuple[float, float]] = field(default_factory=dict)  # id -> the driver's (CPUs, GPUs)

    def _check(self, submission_id: str | None = None) -> None:
        if self.down:
            raise RayUnavailable("fake Ray is down")
        if submission_id in self.odd:
            raise ValueError(f"an answer about {submission_id} nobody expected")

    def submit(
        self,
        *,
        submission_id: str,
        entrypoint: str,
        env_vars: dict[str, str],
        metadata: dict[str, str],
        entrypoint_cpus: float = 0.0,
        entrypoint_gpus: float = 0.0,
    ) -> None:
        self._check()
        if submission_id in self.jobs:
            raise RayJobExists(submission_id)
        self.jobs[submission_id] = FakeRayJob(submission_id, entrypoint, env_vars, metadata)
        self.reserved[submission_id] = (entrypoint_cpus, entrypoint_gpus)
        self.submissions.append(submission_id)

    def info(self, submission_id: str) -> RayJobInfo | None:
        self._check(submission_id)
        job = self.jobs.get(submission_id)
        return RayJobInfo(job.status, job.message) if job else None

    def stop(self, submission_id: str) -> bool:
        self._check(submission_id)
        self.stop_calls.append(submission_id)
        job = self.jobs.get(submission_id)
        if job is None or job.status in RAY_FINAL:
            return False
        job.status = "STOPPED"
        self.stopped.append(submission_id)
        return True

    def logs(self, submission_id: str) -> str | None:
        self._check()
        job = self.jobs.get(submission_id)
        return job.logs if job else None

    def capacity(self) -> Resources:
        self._check()
        return Resources(self.cpus, self.gpus)

    def ping(self) -> None:
        self._check()

    # test helpers
    def set(self, submission_id: str, status: str, *, logs: str = "", message: str | None = None) -> None:
        job = self.jobs[submission_id]
        job.status, job.message = status, message
        job.logs += logs

    def restart(self) -> None:
        """A head restart: every job is forgotten."""
        self.jobs.clear()


@dataclass
class FakeTracker:
    """MLflow runs per job id: `trials[job_id]` is what the driver would have logged."""

    trials: dict[str, list[TrialRun]] = field(default_factory=dict)
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)
    ended: list[tuple[str, str]] = field(default_factory=list)
    down: bool = False  # every read fails, as an unreachable tracking server's
    hang_s: float = 0.0  # every read takes this long first, as a hung one's
    experiments: list[str | None] = field(default_factory=list)  # the experiment of every read
    # job id -> trial id -> metric key -> its history (step = epoch), as MLflow's metric history holds it
    histories: dict[str, dict[str, dict[str, Series]]] = field(default_factory=dict)
    curve_reads: int = 0
    registered: dict[str, list[TeamModel]] = field(default_factory=dict)  # team -> its registered models
    # (job id, trial id) -> what each start of the trial printed, in order (its run's `output/`)
    outputs: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    # (job id, trial id) -> its best checkpoint's files; (model name, version) -> the model's files
    checkpoints: dict[tuple[str, str], dict[str, bytes]] = field(default_factory=dict)
    model_files: dict[tuple[str, str], dict[str, bytes]] = field(default_factory=dict)

    def _read(self, experiment: str | None) -> None:
        self.experiments.append(experiment)
        if self.hang_s:
            time.sleep(self.hang_s)
        if self.down:
            raise ConnectionError("fake MLflow is down")

    def ensure_experiment(self, experiment: str | None = None) -> str | None:
        return "1"

    def job_runs(self, job_id: str, experiment: str | None = None) -> JobRuns:
        self._read(experiment)
        trials = self.trials.get(job_id, [])
        return JobRuns(
            experiment_id="1", parent_run_id=f"parent-{job_id}" if trials else None, trials=list(trials)
        )

    def summary(self, job_id: str, experiment: str | None = None) -> dict[str, Any] | None:
        self._read(experiment)
        return self.summaries.get(job_id)

    def end_runs(self, job_id: str, status: str, experiment: str | None = None) -> int:
        self.ended.append((job_id, status))
        return len(self.trials.get(job_id, []))

    def curves(self, job_id: str, keys: Any, max_points: int, experiment: str | None = None) -> Curves:
        self._read(experiment)
        self.curve_reads += 1
        return {
            trial_id: {k: downsample(v, max_points) for k, v in metrics.items() if k in keys}
            for trial_id, metrics in self.histories.get(job_id, {}).items()
        }

    def models(self, team: str) -> list[TeamModel]:
        self._read(None)
        return list(self.registered.get(team, []))

    def trial_output(
        self, job_id: str, trial_id: str, max_bytes: int, experiment: str | None = None
    ) -> TrialOutput | None:
        self._read(experiment)
        if not any(t.trial_id == trial_id for t in self.trials.get(job_id, [])):
            return None
        starts = self.outputs.get((job_id, trial_id), [])
        text = "".join(f"--- start {n} ---\n{body}" for n, body in enumerate(starts, start=1))
        data = text.encode()
        running = any(t.trial_id == trial_id and t.state == "RUNNING" for t in self.trials[job_id])
        return TrialOutput(
            text=data[-max_bytes:].decode("utf-8", "replace"),
            starts=list(range(1, len(starts) + 1)),
            truncated=len(data) > max_bytes,
            running=running,
        )

    def download_checkpoint(
        self, job_id: str, trial_id: str, dst: Path, experiment: str | None = None
    ) -> Path | None:
        self._read(experiment)
        files = self.checkpoints.get((job_id, trial_id))
        return _write(dst / "best_checkpoint", files) if files is not None else None

    def download_model(self, name: str, version: str, dst: Path) -> Path:
        self._read(None)
        files = self.model_files.get((name, version))
        if files is None:
            raise LookupError(f"fake MLflow has no version {version} of {name}")
        return _write(dst / "artifacts", files)

    # test helpers
    def log_epoch(self, job_id: str, trial_id: str, epoch: int, **metrics: float) -> None:
        """Append one epoch's metrics to a trial's histories (call log_trial for its row)."""
        trial = self.histories.setdefault(job_id, {}).setdefault(trial_id, {})
        for key, value in metrics.items():
            trial.setdefault(key, []).append((epoch, value))

    def log_trial(
        self, job_id: str, trial_id: str, state: str, score: float | None = None, **kw: Any
    ) -> None:
        runs = [t for t in self.trials.get(job_id, []) if t.trial_id != trial_id]
        runs.append(
            TrialRun(
                trial_id=trial_id,
                run_id=f"run-{job_id}-{trial_id}",
                attempt=kw.get("attempt", 1),
                state=state,
                error_class=kw.get("error_class"),
                params=kw.get("params", {"learning_rate": 1e-4}),
                best_score=score,
                last_epoch=kw.get("epoch"),
                metrics=kw.get("metrics", {"score": score} if score is not None else {}),
                wall_s=kw.get("wall_s"),
                config=kw.get("config"),
                device=kw.get("device"),
            )
        )
        self.trials[job_id] = runs


def _write(folder: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def summary_for(job_id: str, value: float = 0.75) -> dict[str, Any]:
    """A summary.json as the sweep contract defines it."""
    return {
        "job_id": job_id,
        "tracking_uri": "sqlite:///fake",
        "parent_run_id": f"parent-{job_id}",
        "main_metric": "accuracy",
        "trials_by_state": {"TERMINATED": 2},
        "cells": [
            {"params": {"learning_rate": 1e-4}, "n": 2, "mean": value, "std": 0.0, "trial_ids": ["t1", "t2"]}
        ],
        "best": {
            "params": {"learning_rate": 1e-4},
            "value": value,
            "run_id": "run-t1",
            "checkpoint_uri": None,
        },
    }


def summary_line(job_id: str) -> str:
    return json.dumps(summary_for(job_id)) + "\n"
