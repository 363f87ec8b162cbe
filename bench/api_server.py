"""The server under test of `smartune bench api`: the real app on SQLite, with a busy one-GPU pool instead of
Ray (the first job is admitted and runs for ever; every later one stays queued while the engine keeps
scheduling) and no MLflow. `python -m bench.api_server DATA_DIR PORT`; bench/api_load.py starts and stops it.
"""

from __future__ import annotations

import sys
from typing import Any


class _BusyPool:
    """A Ray stand-in with one CPU and one GPU: what is submitted runs for ever, so the pool is full after the first
    admission and later jobs queue (every job fits the pool, so none is refused at submission)."""

    def __init__(self) -> None:
        self.running: set[str] = set()

    def submit(self, *, submission_id: str, **_kw: Any) -> None:
        self.running.add(submission_id)

    def info(self, sid: str) -> Any:
        from service.engine.ray_jobs import RayJobInfo

        return RayJobInfo("RUNNING", "") if sid in self.running else None

    def stop(self, _sid: str) -> bool:
        return False

    def logs(self, _sid: str) -> None:
        return None

    def capacity(self) -> Any:
        from service.engine.scheduler import Resources

        return Resources(cpus=1.0, gpus=1.0)

    def ping(self) -> None:
        return None


class _NoRuns:
    def ensure_experiment(self) -> str:
        return "0"

    def job_runs(self, _job_id: str) -> Any:
        from service.engine.tracking import JobRuns

        return JobRuns(None, None, [])

    def summary(self, _job_id: str) -> None:
        return None

    def end_runs(self, _job_id: str, _status: str) -> int:
        return 0


def serve(data_dir: str, port: int) -> None:
    import uvicorn

    from service.config import Settings
    from service.main import create_app

    settings = Settings(
        data_dir=data_dir,
        database_url=None,
        ray_address="http://unused:8265",
        bootstrap_admin=False,
        max_queued_jobs_per_team=100_000,
    )
    app = create_app(settings, ray=_BusyPool(), tracker=_NoRuns())  # type: ignore[arg-type]
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
