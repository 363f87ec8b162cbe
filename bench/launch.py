"""`smartune serve` as a child process, for the benchmarks that measure the whole service (bench/load.py).

`serve()` starts `smartune serve` (as `python -m cli.main serve`) on a free port of 127.0.0.1 with its own
data directory. Without RAY_ADDRESS the service starts its own local Ray head (service/engine/local_head.py);
it is given free ports and a short temp folder here, so it neither reuses nor collides with a head already
on this machine (a `make run`'s at 8265). The job store is `database_url` (a user's own PostgreSQL, say),
or SQLite in the data directory. `serve()` returns once `/readyz` answers 200 (the store and Ray both
answer); `stop()` ends the service with SIGTERM, which stops the head it started, and falls back on what
`<data dir>/run/` records (as `smartune stop` does) when the service does not exit in time.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

READY_TIMEOUT_S = 180.0  # a cold `ray start` on a small machine takes 10-40 s, the service a few more
STOP_TIMEOUT_S = 120.0  # the service stops its head (and requeues that head's jobs) before it exits
# Ports of a Ray head besides the dashboard's and the GCS's (`smartune serve` takes those two from settings).
RAY_PORT_FLAGS = ("--ray-client-server-port", "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
                  "--metrics-export-port", "--node-manager-port", "--object-manager-port",
                  "--runtime-env-agent-port")  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    """One running `smartune serve`."""

    url: str
    data_dir: Path
    process: subprocess.Popen[bytes]
    log: Path
    ray_temp: Path

    def stop(self) -> None:
        from service.engine.run_records import stop_recorded

        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)  # its own session: our child's group only
                self.process.wait(10)
        stop_recorded(self.data_dir)  # a head the service left behind (nothing when it stopped cleanly)
        shutil.rmtree(self.ray_temp, ignore_errors=True)


def serve(
    data_dir: Path,
    *,
    database_url: str | None = None,
    ray_num_cpus: int = 2,
    ready_path: str = "/readyz",
    env: Mapping[str, str] | None = None,
) -> Served:
    """Start `smartune serve` in `data_dir` (SQLite there unless `database_url`), with `env` on top of this
    process's environment, and wait until `ready_path` answers 200 (`/healthz` where no Ray is meant to
    answer: a RAY_ADDRESS in `env` that names a closed port)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    ray_temp = Path(tempfile.mkdtemp(prefix="st-ray-"))  # short: Ray's AF_UNIX socket paths live under it
    child_env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "DATABASE_URL")}
    child_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{child_env.get('PATH', '')}"  # `ray`
    child_env |= {
        "SMARTUNE_RAY_DASHBOARD_PORT": str(free_port()),
        "SMARTUNE_RAY_HEAD_PORT": str(free_port()),
        "SMARTUNE_RAY_START_ARGS": " ".join(f"{flag}={free_port()}" for flag in RAY_PORT_FLAGS),
        "SMARTUNE_RAY_TEMP_DIR": str(ray_temp / "ray"),
        "RAY_USAGE_STATS_ENABLED": "0",
        **(env or {}),
    }
    if database_url:
        child_env["DATABASE_URL"] = database_url
    cmd = [sys.executable, "-m", "cli.main", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--data-dir", str(data_dir), "--ray-num-cpus", str(ray_num_cpus), "--ray-num-gpus", "0",
           "--log-level", "warning"]  # fmt: skip
    log = data_dir.parent / f"serve-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            cmd, env=child_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    served = Served(f"http://127.0.0.1:{port}", data_dir, process, log, ray_temp)
    try:
        _wait_ready(served, ready_path)
    except BaseException:
        served.stop()
        raise
    return served


def _wait_ready(served: Served, ready_path: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if served.process.poll() is not None:
            raise RuntimeError(
                f"smartune serve exited with {served.process.returncode}:\n{_tail(served.log)}"
            )
        try:
            if httpx.get(f"{served.url}{ready_path}", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass  # not listening yet
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"smartune serve not ready after {READY_TIMEOUT_S:.0f} s:\n{_tail(served.log)}"
            )
        time.sleep(0.5)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else ""
