"""The app `bench.dashboard` loads: the real service serving one seeded sweep, without Ray or MLflow.

The app is `service.main.create_app` on a SQLite job store in a given folder, with `IdlePool` for Ray (a
16-CPU, 4-GPU pool where nothing runs) and `InMemoryTracker` for MLflow (trial rows and per-epoch
histories in dicts), so a page load measures the dashboard, not an MLflow server. `seed_sweep` writes a
team, its key and one job of a learning rate x lambda_s x seed grid, every trial with plausible per-epoch
metrics (SMART regulariser included), into both. `Served` runs the app under uvicorn in a thread on a free
local port. Shared with tests/integration/test_dashboard_browser.py.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SECRET = "bench-dashboard-secret-0123456789abcdef"


@dataclass
class InMemoryTracker:
    """The `Tracker` protocol over dicts: trial rows and per-epoch histories per job."""

    trials: dict[str, list[Any]] = field(default_factory=dict)
    histories: dict[str, dict[str, dict[str, list[tuple[int, float]]]]] = field(default_factory=dict)
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)

    def ensure_experiment(self, experiment: str | None = None) -> str | None:
        return "1"

    def job_runs(self, job_id: str, experiment: str | None = None) -> Any:
        from service.engine.tracking import JobRuns

        return JobRuns("1", f"parent-{job_id}", list(self.trials.get(job_id, [])))

    def summary(self, job_id: str, experiment: str | None = None) -> dict[str, Any] | None:
        return self.summaries.get(job_id)

    def end_runs(self, job_id: str, status: str, experiment: str | None = None) -> int:
        return 0

    def curves(self, job_id: str, keys: Any, max_points: int, experiment: str | None = None) -> Any:
        from service.series import downsample

        return {
            trial: {k: downsample(v, max_points) for k, v in metrics.items() if k in keys}
            for trial, metrics in self.histories.get(job_id, {}).items()
        }

    def models(self, team: str) -> list[Any]:
        return []  # the seeded sweep registers no model

    def trial_output(self, job_id: str, trial_id: str, max_bytes: int, experiment: str | None = None) -> None:
        return None  # the seeded trials printed nothing

    def download_checkpoint(
        self, job_id: str, trial_id: str, dst: Path, experiment: str | None = None
    ) -> None:
        return None  # nor kept a checkpoint

    def download_model(self, name: str, version: str, dst: Path) -> Path:
        raise LookupError(f"registered model {name!r} version {version}: the seeded sweep registers none")


class IdlePool:
    """A Ray stand-in with 16 CPUs and 4 GPUs where nothing ever runs (the job is seeded as finished)."""

    def submit(self, **_kw: Any) -> None:
        return None

    def info(self, _sid: str) -> Any:
        return None

    def stop(self, _sid: str) -> bool:
        return False

    def logs(self, _sid: str) -> None:
        return None

    def capacity(self) -> Any:
        from service.engine.scheduler import Resources

        return Resources(cpus=16.0, gpus=4.0)

    def ping(self) -> None:
        return None


def build_app(data_dir: Path, tracker: InMemoryTracker) -> Any:
    from service.config import Settings
    from service.main import create_app

    settings = Settings(
        data_dir=data_dir,
        ray_address="http://ray.invalid:8265",
        mlflow_tracking_uri="sqlite:///unused",
        mlflow_ui_url="http://mlflow.bench",
        mlflow_ui_protected=True,
        bootstrap_admin=False,
        dashboard_secret=SECRET,
        max_cells=2048,
        max_seeds=20,
        rate_limit_per_s=1000.0,
        rate_limit_burst=1000,
    )
    return create_app(settings, ray=IdlePool(), tracker=tracker, run_engine=False)


def _score(lr_index: int, lam_index: int, seed: int, epoch: int) -> float:
    """A plausible dev accuracy curve: rises with epochs, best in the grid's middle, seed noise."""
    centre = -0.01 * ((lr_index - 2) ** 2 + (lam_index - 1) ** 2)
    return 0.55 + 0.15 * (1 - 0.7**epoch) + centre + 0.005 * ((seed * 7919 + epoch * 31) % 5 - 2)


def seed_sweep(
    app: Any,
    tracker: InMemoryTracker,
    *,
    team: str,
    lrs: list[float],
    lambdas: list[float],
    seeds: list[int],
    epochs: int,
    state: str = "SUCCEEDED",
    logged: int | None = None,
) -> tuple[str, str]:
    """A team, its key and one job of the grid lrs x lambdas x seeds, every trial with `logged` (default:
    all `epochs`) epochs in `tracker` and in the job store (as the engine's sync would leave them).
    Returns (job id, key)."""
    from service.engine import sync
    from service.engine.tracking import TrialRun
    from service.schemas import TeamCreate
    from service.store import crud
    from service.store.models import JobState
    from worker.contract.spec import JobSpec

    body = {
        "name": f"bench-{len(lrs) * len(lambdas) * len(seeds)}",
        "task": "rte",
        "model": "tiny-random",
        "method": "smart",
        "training": {"epochs": epochs, "max_train_samples": 32, "max_eval_samples": 16},
        "search_space": {
            "axes": {
                "learning_rate": {"type": "grid", "values": lrs},
                "lambda_s": {"type": "grid", "values": lambdas},
            }
        },
        "seeds": seeds,
        "resources": {"cpus": 1, "gpus": 0},
    }
    spec = JobSpec.model_validate(body)
    db = app.state.db
    with db.write_sessions() as session:
        team_row = crud.get_team(session=session, name=team) or crud.create_team(
            session=session, team_in=TeamCreate(name=team, cpu_quota=16.0, gpu_quota=4.0)
        )
        _key_row, key = crud.create_api_key(session=session, team=team_row)
        job = crud.create_job(
            session=session,
            team=team_row,
            spec=spec,
            n_trials=len(lrs) * len(lambdas) * len(seeds),
            idempotency_key=None,
        )
        session.commit()
        job_id = job.id
    runs, histories = [], {}
    done = epochs if logged is None else logged  # epochs logged so far (0: none yet)
    n = 0
    for i, lr in enumerate(lrs):
        for j, lam in enumerate(lambdas):
            for seed in seeds:
                n += 1
                trial_id = f"trial_{n:04d}"
                scores = [_score(i, j, seed, e) for e in range(1, done + 1)]
                histories[trial_id] = {
                    "score": [(e, s) for e, s in enumerate(scores, start=1)],
                    # the loss falls faster at a larger learning rate; seeds differ by a few percent
                    "train_loss": [
                        (e, 0.7 * (0.85 - 0.05 * i) ** e * (1 + 0.03 * (seed % 3 - 1)))
                        for e in range(1, done + 1)
                    ],
                    "train_r_s": [(e, lam * 0.01 * 0.9**e) for e in range(1, done + 1)],
                    "train_d_breg": [(e, 0.02 * 0.3**e) for e in range(1, done + 1)],  # spans decades
                    "train_delta_linf": [(e, 1e-5) for e in range(1, done + 1)],
                }
                runs.append(
                    TrialRun(
                        trial_id=trial_id,
                        run_id=f"run-{job_id}-{n}",
                        attempt=1,
                        state="TERMINATED" if state == "SUCCEEDED" else "RUNNING",
                        params={"learning_rate": lr, "lambda_s": lam, "seed": seed},
                        best_score=max(scores, default=None),  # None until an epoch is logged
                        last_epoch=done or None,
                        metrics={k: v[-1][1] for k, v in histories[trial_id].items() if v}
                        | ({"epoch": float(done)} if done else {}),
                    )
                )
    tracker.trials[job_id] = runs
    tracker.histories[job_id] = histories
    with db.write_sessions() as session:
        sync.apply_runs(session=session, job_id=job_id, runs=tracker.job_runs(job_id))
        row = crud.get_job(session=session, job_id=job_id, team_id=None)
        assert row is not None
        crud.set_state(session=session, job=row, state=JobState.RUNNING, reason="bench: running")
        if state == "SUCCEEDED":
            crud.set_state(session=session, job=row, state=JobState.SUCCEEDED, reason="bench: sweep finished")
        row.best_value = max((r.best_score for r in runs if r.best_score is not None), default=None)
        session.commit()
    return job_id, key


class Served:
    """The app under uvicorn in a thread on a free local port (its lifespan runs: store, migrations)."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.app = app
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not (self.server.started and self.server.servers):
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        self.app.state.engine.refresh_capacity()  # no engine thread: read the pool once
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
