"""Throwaway infrastructure for the integration tests (and research/pool_replay): a local Ray head with
logical GPUs, a PostgreSQL server (tests/support/postgres.py), and `smartune serve` processes. Every process
is started in its own session and stopped by its own process group, never by name (other Ray clusters on
the machine are left alone)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from service.engine.ray_jobs import JobSubmissionAdapter, auth_headers, token_path
from tests.support import store_templates
from tests.support.postgres import Postgres, start_postgres  # noqa: F401 - the fixtures' throwaway server

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports. Each socket stays bound until all are chosen: calling free_port() in a row
    can hand out a port it has just released (a Ray head once got one port for two components, 30 Nov)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


class ProcessDied(RuntimeError):
    """A process we wait for exited instead of becoming ready."""


def wait_for(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except ProcessDied:
            raise
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(interval)
    raise TimeoutError(f"{what} not ready after {timeout:.0f}s")


def stop_group(
    process: subprocess.Popen[Any],
    sig: int = signal.SIGTERM,
    timeout: float = 60,
    *,
    leader_only: bool = False,
) -> None:
    """Signal a process we started (or its whole group), wait, then SIGKILL what is left of the group."""
    if process.poll() is None:
        try:
            if leader_only:
                process.send_signal(sig)
            else:
                os.killpg(process.pid, sig)
            process.wait(timeout)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # stragglers of our own group only
    except ProcessLookupError:
        pass
    if process.poll() is None:
        process.wait(10)


# What the heads the tests start (and the heads their servers start) do differently from Ray's defaults, all to
# spend less of a 2-core machine's CPU on Ray's own upkeep (docs/testing.md, "Where the integration tiers' CPU
# goes"); nothing smartune reads depends on them (it reads nodes and jobs, not Ray's metrics or its
# dashboard's live stats):
RAY_TEST_HEAD_ENV = {
    # No 2 Python workers prestarted for each driver that connects: the tiers connect some 120 drivers and
    # the prestarted workers mostly idled (about 2 CPU-s each to start); a trial's worker starts when placed.
    "RAY_prestart_worker_first_driver": "0",
    # Ray's own telemetry at a slower pace or off: the event agent's 0.1-s loop, the reporter's per-process
    # stats every 5 s, every process's metrics export. An idle head: 4.6 -> 3.3 CPU-s a minute here.
    "EVENT_AGENT_REPORT_INTERVAL_SECONDS": "2",
    "REPORTER_UPDATE_INTERVAL_MS": "30000",
    "METRICS_RECORD_INTERVAL_S": "30",
    "RAY_enable_metrics_collection": "0",
}


def base_env() -> dict[str, str]:
    env = {**os.environ, "RAY_AUTH_MODE": "token", "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    env |= RAY_TEST_HEAD_ENV
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    for name in ("RAY_ADDRESS", "DATABASE_URL", "MLFLOW_TRACKING_URI"):
        env.pop(name, None)
    return env


RAY_PORT_FLAGS = (
    "--port",
    "--dashboard-port",
    "--ray-client-server-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--metrics-export-port",
    "--node-manager-port",
    "--object-manager-port",
    "--runtime-env-agent-port",
)


def ray_ports() -> dict[str, int]:
    """A distinct free port for each of RAY_PORT_FLAGS."""
    return dict(zip(RAY_PORT_FLAGS, free_ports(len(RAY_PORT_FLAGS)), strict=True))


@dataclass
class RayHead:
    address: str
    process: subprocess.Popen[Any]
    log: Path
    ports: dict[str, int]
    num_cpus: int = 4
    num_gpus: int = 2

    @property
    def gcs_address(self) -> str:
        """Where a Ray driver connects (`ray.init(address=...)`, RAY_ADDRESS of a driver process): the GCS
        listens on the node's IP address, which Ray picks as below, not on 127.0.0.1."""
        from ray.util import get_node_ip_address

        return f"{get_node_ip_address()}:{self.ports['--port']}"

    def declared(self) -> dict[str, str]:
        """Its one node's size as a deployment declares it to `smartune serve` (the admission of a job
        submitted before the pool is read: service.admission)."""
        return {
            "SMARTUNE_LARGEST_NODE_CPUS": str(self.num_cpus),
            "SMARTUNE_LARGEST_NODE_GPUS": str(self.num_gpus),
        }

    def stop(self) -> None:
        stop_group(self.process, leader_only=True)  # `ray start --block` shuts its node down on SIGTERM
        shutil.rmtree(self.log.parent, ignore_errors=True)

    def crash(self) -> None:
        """SIGKILL the head's process group at once (GCS, raylet, dashboard): a head that dies, not one
        that shuts down (which can take long enough for a short sweep to finish). Workers and job drivers
        follow: they exit when the raylet goes, and Ray's watcher kills a driver whose supervisor died."""
        stop_group(self.process, signal.SIGKILL, timeout=30)


def start_ray_head(
    *,
    num_cpus: int = 4,
    num_gpus: int = 2,
    ports: dict[str, int] | None = None,
    env: dict[str, str] | None = None,
    args: Sequence[str] = (),
    retried: bool = False,
) -> RayHead:
    """`ray start --head --block` on free ports (or the given ones, to stand in for a restarted head), with
    token auth and logical GPUs, and `args` (more `ray start` flags); returned once its dashboard and its
    dashboard agent answer (a head on free ports whose agent never does is started again, once, on others).
    Its temp folder is short: Ray's AF_UNIX sockets live there, and pytest's temp paths exceed the 107-byte
    limit."""
    tmp = Path(tempfile.mkdtemp(prefix="st-ray-"))
    env_in, given_ports = env, ports is not None
    env = base_env() | (env or {})  # `env`: what the node's workers and drivers see (stores, credentials)
    if not token_path(env).is_file():  # `ray get-auth-token` is a 2-CPU-second Python start: only once
        subprocess.run(
            [str(VENV_BIN / "ray"), "get-auth-token", "--generate"], env=env, check=True, capture_output=True
        )
    ports = dict(ports) if ports else ray_ports()
    cmd = [str(VENV_BIN / "ray"), "start", "--head", "--block", "--disable-usage-stats"]
    cmd += [f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}", "--include-dashboard=true"]
    cmd += ["--dashboard-host=127.0.0.1", f"--temp-dir={tmp / 'ray'}"]
    cmd += [f"{flag}={port}" for flag, port in ports.items()] + list(args)
    log = tmp / "ray-head.log"
    process = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )
    address = f"http://127.0.0.1:{ports['--dashboard-port']}"

    def up() -> bool:
        if process.poll() is not None:
            raise ProcessDied(f"ray start exited:\n{log.read_text()[-3000:]}")
        return httpx.get(f"{address}/api/version", headers=auth_headers(), timeout=2).status_code == 200

    wait_for(up, 120, "Ray head")
    head = RayHead(address, process, log, ports, num_cpus, num_gpus)
    try:  # Ray's job submission waits for the node's dashboard agent, however long it takes to come
        wait_for(lambda: _agent_healthy(ports["--dashboard-agent-listen-port"]), AGENT_WAIT_S, "the agent")
    except TimeoutError:
        agent_logs = sorted((tmp / "ray").glob("session_*/logs/dashboard_agent*"))
        said = "".join(p.read_text(errors="replace")[-2000:] for p in agent_logs) or log.read_text()[-2000:]
        head.stop()
        if given_ports or retried:  # a head restarted at its old address, or a second failure: the test's
            raise ProcessDied(f"the Ray head's dashboard agent never answered:\n{said}") from None
        return start_ray_head(num_cpus=num_cpus, num_gpus=num_gpus, env=env_in, args=args, retried=True)
    return head


# The dashboard agent answers 1 to 3 s after the dashboard here. Once (2026-11-29) one never did, and every
# job submitted to that head timed out for 4 minutes: most likely one of its free ports was taken between
# `free_port()` and the agent's bind. Such a head is started again, once, on other ports.
AGENT_WAIT_S = 60


def _agent_healthy(port: int) -> bool:
    return httpx.get(f"http://127.0.0.1:{port}/api/local_raylet_healthz", timeout=2).status_code == 200


def wait_for_gpus(address: str, gpus: float, timeout: float = 180) -> None:
    """Until the Ray cluster at `address` (its dashboard) has `gpus` GPUs: its nodes have joined."""
    adapter = JobSubmissionAdapter(address)
    wait_for(
        lambda: adapter.capacity().gpus >= gpus - 1e-9, timeout, f"{gpus:g} GPUs in the Ray cluster", 1.0
    )


@dataclass
class Server:
    """One `smartune serve` process."""

    url: str
    data_dir: Path
    env: dict[str, str]
    port: int
    process: subprocess.Popen[Any] | None = None
    logs: list[Path] = field(default_factory=list)

    def start(self) -> Server:
        log = self.data_dir.parent / f"server-{len(self.logs)}.log"
        self.logs.append(log)
        cmd = [
            str(VENV_BIN / "smartune"),
            "serve",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]
        self.process = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=self.env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

        def up() -> bool:
            if self.process is not None and self.process.poll() is not None:
                raise ProcessDied(f"smartune serve exited:\n{log.read_text()[-3000:]}")
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200

        wait_for(up, 90, "smartune serve", interval=0.3)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None:
            stop_group(self.process, sig)

    def output(self) -> str:
        return "".join(p.read_text() for p in self.logs if p.exists())

    def admin_key(self) -> str:
        """The bootstrap admin key, read from the file the server says it wrote (mode 0600)."""
        for line in self.output().splitlines():
            if found := re.search(r"bootstrap admin key written to (.+) \(mode 0600\)", line):
                return Path(found.group(1)).read_text().strip()
        raise LookupError("no bootstrap admin key written")


def make_server(tmp: Path, *, ray_address: str, database_url: str | None = None, **env: str) -> Server:
    port = free_port()
    data_dir = tmp / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    server_env = base_env() | {
        "RAY_ADDRESS": ray_address,
        "SMARTUNE_SCHEDULER_INTERVAL_S": "0.5",
        "SMARTUNE_CAPACITY_TTL_S": "1",
        "SMARTUNE_MLFLOW_UI_PROTECTED": "true",  # as a deployment with its MLflow UI behind auth: links shown
        "SMARTUNE_ENTRYPOINT_PYTHON": sys.executable,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        **env,
    }
    if database_url:
        server_env["DATABASE_URL"] = database_url
    if "MLFLOW_TRACKING_URI" not in env:
        store_templates.seed(data_dir, job_store=not database_url)  # empty stores, made once per process
    return Server(url=f"http://127.0.0.1:{port}", data_dir=data_dir, env=server_env, port=port)
