"""The embedded deployment's Ray head: started by `smartune serve`, stopped with it, found by `smartune stop`.

`smartune serve` without `RAY_ADDRESS` needs a Ray head on this machine. It reuses only the one this
deployment started (its run record, below, names a head that still runs: after a crash or `--keep-ray`), after
checking that it refuses a request without a token and accepts this deployment's. Otherwise it starts its own
as a child, `ray start --head --block`, which stops every Ray process it started when it receives SIGTERM, on
the ports, temp dir and token that service.engine.head_plan picks (another deployment's head on the same host
is never attached to). The service stops its head when it exits, unless told to keep it (`--keep-ray`:
running sweeps then outlive the service).

What runs is recorded under `<data dir>/run/` (service.engine.run_records), so `smartune stop` (and `make
stop`) can stop what `make run` started, also after a crash left it behind.

A head on a machine with GPUs advertises their memory as the custom resource `gpu_memory_mb` (MiB, all its
GPUs together), by which the sweep driver packs trials onto GPUs (docs/memory_packing.md). It is read with
torch in a child process (the service never imports torch); without torch or GPUs nothing is advertised.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from service.engine import head_plan
from service.engine.ray_jobs import JobSubmissionAdapter, RayUnavailable, auth_headers, ray_executable
from service.engine.run_records import STOP_TIMEOUT_S, record_head, recorded_head, run_dir, stop_record

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0  # a cold `ray start` on a small machine takes 10-40 s
GPU_PROBE_TIMEOUT_S = 60.0  # importing torch and initialising CUDA takes 2-20 s
# MiB of each visible GPU, as a JSON list; an empty list without CUDA.
_GPU_PROBE = ("import json, torch; n = torch.cuda.device_count() if torch.cuda.is_available() else 0; "
              "print(json.dumps([torch.cuda.get_device_properties(i).total_memory >> 20 for i in range(n)]))")  # fmt: skip


class HeadNotOurs(RuntimeError):
    """A Ray head listens on the dashboard port but does not have the expected auth."""


@dataclass
class LocalHead:
    address: str  # the dashboard URL, http://127.0.0.1:PORT
    process: subprocess.Popen[bytes] | None  # the `ray start --block` child; None: the recorded head reused
    record: Path | None  # ray-head.json of this deployment's head (started here, or recorded and reused)
    token: str | None = None  # the token the head checks (this deployment's)
    said: str = ""  # one line for the startup output: reused or started, where, and why there


def check_auth(address: str, *, token: str | None = None, timeout_s: float = 5.0) -> None:
    """Raise HeadNotOurs unless the head at `address` refuses an anonymous request and accepts our token;
    RayUnavailable when nothing answers."""
    try:
        anonymous = httpx.get(f"{address}/api/version", timeout=timeout_s)
        ours = httpx.get(f"{address}/api/version", headers=auth_headers(token), timeout=timeout_s)
    except httpx.HTTPError as err:
        raise RayUnavailable(f"Ray dashboard at {address}: {type(err).__name__}") from err
    if anonymous.status_code < 400:
        raise HeadNotOurs(
            f"a Ray head at {address} answers without a token (token auth off): smartune will not send jobs "
            "to it. Stop it (`ray stop`) or give another port (SMARTUNE_RAY_DASHBOARD_PORT)"
        )
    if ours.status_code in (401, 403):
        raise HeadNotOurs(
            f"a Ray head at {address} refuses this deployment's token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or "
            "<data dir>/ray-auth-token): it belongs to someone else. Stop it or give another port"
        )
    if ours.status_code >= 400:
        raise RayUnavailable(f"Ray dashboard at {address} answered {ours.status_code}")


def gpu_memory_mb(num_gpus: int | None = None, python: str = sys.executable) -> int | None:
    """MiB of the GPUs a head started here gets (the first `num_gpus` visible ones), read by `python` with
    torch in a child process; None without torch, CUDA or GPUs (or when the probe fails)."""
    if num_gpus == 0:
        return None
    try:
        done = subprocess.run([python, "-c", _GPU_PROBE], capture_output=True, text=True,
                              timeout=GPU_PROBE_TIMEOUT_S, check=True)  # fmt: skip
        sizes = [int(mb) for mb in json.loads(done.stdout.strip().splitlines()[-1])]
    except (OSError, subprocess.SubprocessError, ValueError, IndexError, TypeError):
        logger.info("no GPU memory to advertise (torch or CUDA not available to %s)", python)
        return None
    total = sum(sizes[:num_gpus] if num_gpus is not None else sizes)
    return total or None


def resource_args(num_gpus: int | None, extra_args: str) -> list[str]:
    """`--resources` advertising the GPUs' memory, unless `extra_args` gives its own."""
    if "--resources" in extra_args:
        return []
    memory = gpu_memory_mb(num_gpus)
    return [f"--resources={json.dumps({'gpu_memory_mb': memory})}"] if memory else []


def declared_size(num_cpus: int | None, num_gpus: int | None, extra_args: str = "") -> dict[str, float]:
    """The size of the node a head started here gets, as the settings `largest_node_cpus` / `_gpus`
    (service.admission judges submissions by it until the pool is read): the `--num-cpus` / `--num-gpus`
    it is given; else, for CPUs, those this process may run on (what Ray counts, unless a container's CPU
    quota is lower: then set SMARTUNE_RAY_NUM_CPUS). GPUs Ray detects itself are not guessed, nor is a
    size that `extra_args` sets."""
    size: dict[str, float] = {}
    if "--num-cpus" not in extra_args:
        affinity = getattr(os, "sched_getaffinity", None)
        here = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
        size["largest_node_cpus"] = float(num_cpus if num_cpus is not None else here)
    if num_gpus is not None and "--num-gpus" not in extra_args:
        size["largest_node_gpus"] = float(num_gpus)
    return size


def start_or_reuse(
    data_dir: Path,
    *,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    ports: Mapping[str, int] | None = None,
    explicit: frozenset[str] = frozenset(),
    temp_dir: Path | None = None,
    extra_args: str = "",
    token: str | None = None,
) -> LocalHead:
    """This deployment's Ray head, with token auth: the one recorded in `<data dir>/run/ray-head.json` while
    it runs, else a new child `ray start --head --block` recorded there. `ports`: `ray start` flag -> port
    wanted (head_plan.RAY_DEFAULT_PORTS' flags), `explicit`: those the user set; `token`: the user's
    (RAY_AUTH_TOKEN), else RAY_AUTH_TOKEN_PATH's, else the deployment's own file."""
    secret, token_env = head_plan.deployment_token(data_dir, token, os.environ)
    given = head_plan.given_ports(extra_args)  # SMARTUNE_RAY_START_ARGS' ports are the user's too
    plan = head_plan.plan_head(
        data_dir,
        recorded=recorded_head(data_dir),
        wanted={**(ports or {}), **given},
        explicit=explicit | frozenset(given),
        temp_dir=temp_dir,
        port_free=head_plan.port_free,
        pick_port=head_plan.pick_port,
        ray_answers=_ray_answers,
    )
    if plan.reuse is not None:
        head = LocalHead(plan.address, None, plan.reuse.record, secret, plan.said)
        _check_recorded(head)
        return head
    ray = ray_executable()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    env |= {"RAY_AUTH_MODE": "token", **token_env}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    cmd = [ray, "start", "--head", "--block", "--disable-usage-stats", "--include-dashboard=true"]
    cmd += ["--dashboard-host=127.0.0.1", *(f"{flag}={port}" for flag, port in plan.ports.items())]
    cmd += [f"--num-cpus={num_cpus}"] if num_cpus is not None else []
    cmd += [f"--num-gpus={num_gpus}"] if num_gpus is not None else []
    cmd += [f"--temp-dir={plan.temp_dir}"] if plan.temp_dir is not None else []
    cmd += resource_args(num_gpus, extra_args)
    cmd += shlex.split(extra_args)
    folder = run_dir(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    log = (folder / "ray-head.log").open("ab")
    logger.info("starting a local Ray head: %s (output in %s)", " ".join(cmd), log.name)
    # Its own session: a Ctrl-C meant for the service does not reach the head before the service stops it.
    process = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    record = folder / "ray-head.json"
    record_head(record, process.pid, plan.address)
    head = LocalHead(plan.address, process, record, secret, plan.said)
    try:
        _wait_until_up(head)
    except BaseException:
        stop(head)
        raise
    record_head(
        record, process.pid, plan.address
    )  # long exec'd by now: the command line `smartune stop` checks
    return head


def _check_recorded(head: LocalHead) -> None:
    """A recorded head must be up and take this deployment's token (one started before the deployment had
    a token of its own, or with another RAY_AUTH_TOKEN, does not)."""
    try:
        try:
            check_auth(head.address, token=head.token)
        except RayUnavailable:  # still starting, or about to stop
            _wait_until_up(head)
            check_auth(head.address, token=head.token)
    except HeadNotOurs as err:
        raise HeadNotOurs(
            f"{err}. It is the head this deployment started earlier ({head.record}): stop it with `smartune "
            "stop`, then start again"
        ) from err


def _ray_answers(port: int) -> bool:
    """A Ray dashboard answers on `port` (with token auth, it refuses an anonymous request)."""
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/api/version", timeout=2)
    except httpx.HTTPError:
        return False
    return response.status_code == 401 or "ray_version" in response.text


def _wait_until_up(head: LocalHead) -> None:
    adapter = JobSubmissionAdapter(head.address, token=head.token)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if head.process is not None and head.process.poll() is not None:
            raise RuntimeError(f"the Ray head exited with {head.process.returncode}: see its log in run/")
        try:
            adapter.ping()
            return
        except RayUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def stop(head: LocalHead) -> None:
    """Stop this deployment's head (SIGTERM to `ray start --block`, which stops its processes): the child
    started here, or the recorded one reused."""
    if head.process is None:
        if head.record is not None:
            stop_record(head.record)
        return
    if head.process.poll() is None:
        head.process.send_signal(signal.SIGTERM)
        try:
            head.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            head.process.kill()
            head.process.wait()
    if head.record is not None:
        head.record.unlink(missing_ok=True)
