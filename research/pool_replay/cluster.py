"""The replay's real stack on this machine: a multi-node Ray cluster and a `smartune serve` pointed at it.

The cluster is a head with no GPUs (it hosts the Ray jobs' drivers) and `nodes` worker nodes of
`gpus_per_node` logical GPUs each, every one a `ray start --block` of its own with its own ports, temp folder
and token auth (tests/support/cluster.py starts the head). The server runs the sleeping sweep driver
(`SMARTUNE_SWEEP_MODULE=research.pool_replay.sleep_sweep`) with its own data directory, and the teams are
created with `smartune admin create-team` (weight, quotas, a key each). `Stack.stop` ends every process this
module started, by its process group, never by name: other Ray clusters on the machine are left alone.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from research.pool_sim.workload import Team
from tests.support.cluster import (
    REPO,
    VENV_BIN,
    RayHead,
    Server,
    base_env,
    free_port,
    make_server,
    start_ray_head,
    stop_group,
    wait_for_gpus,
)

SWEEP_MODULE = "research.pool_replay.sleep_sweep"
NODE_PORT_FLAGS = (
    "--node-manager-port",
    "--object-manager-port",
    "--metrics-export-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
)
OBJECT_STORE_BYTES = 100 * 1024 * 1024  # per node: sleeping trials pass no data


@dataclass
class Stack:
    head: RayHead | None = None
    workers: list[subprocess.Popen[Any]] = field(default_factory=list)
    server: Server | None = None
    keys: dict[str, str] = field(default_factory=dict)  # team name -> API key
    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="st-replay-")))
    folders: list[Path] = field(default_factory=list)  # the worker nodes' temp folders

    def stop(self) -> None:
        """Server first (no new dispatch), then the worker nodes, then the head; each by its group."""
        if self.server is not None:
            with suppress(Exception):
                self.server.stop()
        for worker in self.workers:
            with suppress(Exception):
                stop_group(worker, leader_only=True)  # `ray start --block` stops its node on SIGTERM
        if self.head is not None:
            with suppress(Exception):
                self.head.stop()
        for folder in [self.tmp, *self.folders]:
            shutil.rmtree(folder, ignore_errors=True)


def start_workers(head: RayHead, stack: Stack, *, nodes: int, gpus_per_node: int, cpus_per_node: int) -> None:
    gcs = f"127.0.0.1:{head.ports['--port']}"
    for i in range(nodes):
        folder = Path(tempfile.mkdtemp(prefix=f"st-n{i}-"))  # short: Ray's AF_UNIX sockets live there
        stack.folders.append(folder)
        cmd = [str(VENV_BIN / "ray"), "start", f"--address={gcs}", "--block", "--disable-usage-stats"]
        cmd += [f"--num-cpus={cpus_per_node}", f"--num-gpus={gpus_per_node}", f"--temp-dir={folder}"]
        cmd += [f"--object-store-memory={OBJECT_STORE_BYTES}"]
        cmd += [f"{flag}={free_port()}" for flag in NODE_PORT_FLAGS]
        log = stack.tmp / f"ray-node-{i}.log"
        stack.workers.append(
            subprocess.Popen(
                cmd,
                cwd=REPO,
                env=base_env(),
                stdout=log.open("w"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        )


def create_teams(server: Server, teams: list[Team]) -> dict[str, str]:
    """`smartune admin create-team` per team: its weight, quotas no smaller than the pool (the fair-share
    order alone divides it, as in research/pool_sim), and its first key."""
    keys = {}
    for team in teams:
        cmd = [
            str(VENV_BIN / "smartune"),
            "admin",
            "--data-dir",
            str(server.data_dir),
            "create-team",
            team.name,
        ]
        cmd += ["--weight", f"{team.weight:g}", "--gpus", "1000", "--cpus", "1000", "--max-jobs", "1000"]
        done = subprocess.run(
            cmd, cwd=REPO, env=server.env, capture_output=True, text=True, check=True, timeout=120
        )
        keys[team.name] = done.stdout.strip().splitlines()[-1]
    return keys


@contextmanager
def stack(
    teams: list[Team],
    *,
    nodes: int,
    gpus_per_node: int,
    cpus_per_node: int,
    interval_s: float,
    head_cpus: int = 1,
    placement: str = "best-fit",
) -> Iterator[Stack]:
    """The whole real path, up and ready (every GPU joined, teams created); stopped on leaving, always."""
    s = Stack()
    try:
        s.head = start_ray_head(num_cpus=head_cpus, num_gpus=0)
        start_workers(s.head, s, nodes=nodes, gpus_per_node=gpus_per_node, cpus_per_node=cpus_per_node)
        wait_for_gpus(s.head.address, nodes * gpus_per_node)
        s.server = make_server(
            s.tmp,
            ray_address=s.head.address,
            SMARTUNE_SWEEP_MODULE=SWEEP_MODULE,
            SMARTUNE_SCHEDULER_INTERVAL_S=f"{interval_s:g}",
            SMARTUNE_CAPACITY_TTL_S="10",
            SMARTUNE_BOOTSTRAP_ADMIN="false",
            SMARTUNE_TRIAL_PLACEMENT=placement,  # passed on to every driver (service.engine.dispatch)
        ).start()
        s.keys = create_teams(s.server, teams)
        time.sleep(max(2.0, interval_s))  # the engine's first rounds: reconciled, capacity read
        yield s
    finally:
        s.stop()
