"""Empty stores made once per process and copied into each test server's data folder: the job store
migrated to head and an MLflow SQLite store. A fresh `smartune serve` otherwise spends about 2 CPU-s of its
start on them (its Alembic migrations, and MLflow's own when the engine first opens the store), some 40
times a run. What a fresh data folder does on first start stays covered where a server starts without
`make_server` (tests/integration/test_local_head.py, the README walkthrough, `smartune bench load`), and the
migrations themselves by tests/service (`empty_db_url`)."""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path

JOB_STORE, MLFLOW_STORE = "smartune.db", "mlflow.db"  # the names service/config.py gives them in a data dir


@functools.cache
def templates() -> Path:
    """The folder holding both empty stores, made on first use (about 2 CPU-s, once per process)."""
    from mlflow import MlflowClient

    from service.store.db import connect, migrate

    folder = Path(tempfile.mkdtemp(prefix="smartune-store-templates-"))
    db = connect(f"sqlite:///{folder / JOB_STORE}")
    migrate(db)
    db.dispose()  # the last connection closed: the WAL is checkpointed into the file, which is all there is
    MlflowClient(f"sqlite:///{folder / MLFLOW_STORE}").search_experiments()
    return folder


def seed(data_dir: Path, *, job_store: bool = True) -> None:
    """Copies the empty stores into `data_dir`, each only where none is there yet (a restarted server keeps
    its own); `job_store=False` where the jobs live in PostgreSQL."""
    names = [JOB_STORE, MLFLOW_STORE] if job_store else [MLFLOW_STORE]
    for name in names:
        if not (data_dir / name).exists():
            shutil.copyfile(templates() / name, data_dir / name)
