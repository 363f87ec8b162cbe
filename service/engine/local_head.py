"""The embedded deployment's Ray head: started by `smartune serve`, stopped with it, found by `smartune stop`.

`smartune serve` without `RAY_ADDRESS` needs a Ray head on this machine. It reuses one that already listens
on the dashboard port only after checking that it is ours: it must refuse a request without a token (token
auth on) and accept this machine's token. Otherwise it starts one as a child, `ray start --head --block`,
which stops every Ray process it started when it receives SIGTERM. The service stops that child when it
exits, unless told to keep it (`--keep-ray`: running sweeps then outlive the service).

What runs is recorded under `<data dir>/run/` (`serve.json`, `ray-head.json`: pids and addresses), so
`smartune stop` (and `make stop`) can stop what `make run` started, also after a crash left it behind.
A pid is signalled only while its command line is still the recorded one (pids are reused).

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
from dataclasses import dataclass
from pathlib import Path

import httpx

from service.engine.ray_jobs import JobSubmissionAdapter, RayUnavailable, auth_headers, ray_executable

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0  # a cold `ray start` on a small machine takes 10-40 s
GPU_PROBE_TIMEOUT_S = 60.0  # importing torch and initialising CUDA takes 2-20 s
# MiB of each visible GPU, as a JSON list; an empty list without CUDA.
_GPU_PROBE = ("import json, torch; n = torch.cuda.device_count() if torch.cuda.is_available() else 0; "
              "print(json.dumps([torch.cuda.get_device_properties(i).total_memory >> 20 for i in range(n)]))")  # fmt: skip
STOP_TIMEOUT_S = 60.0


class HeadNotOurs(RuntimeError):
    """A Ray head listens on the dashboard port but does not have the expected auth."""


@dataclass
class LocalHead:
    address: str  # the dashboard URL, http://127.0.0.1:PORT
    process: subprocess.Popen[bytes] | None  # the `ray start --block` child; None: an existing head reused
    record: Path | None  # ray-head.json, when this process started the head


def run_dir(data_dir: Path) -> Path:
    return data_dir / "run"


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
            f"a Ray head at {address} refuses this machine's token (RAY_AUTH_TOKEN or ~/.ray/auth_token): it "
            "belongs to someone else. Stop it or give another port (SMARTUNE_RAY_DASHBOARD_PORT)"
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
    dashboard_port: int = 8265,
    head_port: int = 6379,
    temp_dir: Path | None = None,
    extra_args: str = "",
) -> LocalHead:
    """A Ray head with token auth on this machine: an existing one that passes `check_auth`, else a new
    child `ray start --head --block` recorded in `<data dir>/run/ray-head.json`."""
    address = f"http://127.0.0.1:{dashboard_port}"
    try:
        check_auth(address)
        logger.info("reusing the Ray head at %s (token auth checked)", address)
        return LocalHead(address, None, None)
    except RayUnavailable:
        pass  # nothing listens: start one
    ray = ray_executable()
    env = {**os.environ, "RAY_AUTH_MODE": "token"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    subprocess.run([ray, "get-auth-token", "--generate"], env=env, check=True, capture_output=True)
    cmd = [ray, "start", "--head", "--block", "--disable-usage-stats", "--include-dashboard=true"]
    cmd += [f"--port={head_port}", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}"]
    cmd += [f"--num-cpus={num_cpus}"] if num_cpus is not None else []
    cmd += [f"--num-gpus={num_gpus}"] if num_gpus is not None else []
    cmd += [f"--temp-dir={temp_dir}"] if temp_dir is not None else []
    cmd += resource_args(num_gpus, extra_args)
    cmd += shlex.split(extra_args)
    folder = run_dir(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    log = (folder / "ray-head.log").open("ab")
    logger.info("starting a local Ray head: %s (output in %s)", " ".join(cmd), log.name)
    # Its own session: a Ctrl-C meant for the service does not reach the head before the service stops it.
    process = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    record = folder / "ray-head.json"
    _record_head(record, process.pid, address)
    head = LocalHead(address, process, record)
    try:
        _wait_until_up(head)
    except BaseException:
        stop(head)
        raise
    _record_head(record, process.pid, address)  # long exec'd by now: the command line `smartune stop` checks
    return head


def _record_head(record: Path, pid: int, address: str) -> None:
    """The head's pid and command line in run/ray-head.json. Right after Popen the child may not have
    exec'd yet (its command line is still this process's), so read it once it differs, for a moment."""
    own, deadline = _cmdline(os.getpid()), time.monotonic() + 5
    cmdline = _cmdline(pid)
    while cmdline in (own, "") and time.monotonic() < deadline:
        time.sleep(0.05)
        cmdline = _cmdline(pid)
    record.write_text(json.dumps({"pid": pid, "address": address, "cmdline": cmdline}))


def _wait_until_up(head: LocalHead) -> None:
    adapter = JobSubmissionAdapter(head.address)
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
    """Stop a head this process started (SIGTERM to `ray start --block`, which stops its processes)."""
    if head.process is None:
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


def record_serve(data_dir: Path, url: str) -> Path:
    folder = run_dir(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "serve.json"
    path.write_text(json.dumps({"pid": os.getpid(), "url": url, "cmdline": _cmdline(os.getpid())}))
    return path


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:  # gone (or not Linux: then trust the pid's liveness alone)
        return "" if Path("/proc").is_dir() else "?"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_recorded(data_dir: Path) -> list[str]:
    """Stop what `<data dir>/run/` records (the service first, then the head); return what was done."""
    done: list[str] = []
    for name in ("serve.json", "ray-head.json"):
        path = run_dir(data_dir) / name
        if not path.is_file():
            continue
        entry = json.loads(path.read_text())
        pid, recorded = int(entry["pid"]), str(entry["cmdline"])
        cmdline = _cmdline(pid)
        if _alive(pid) and (cmdline == recorded or cmdline == "?"):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
            done.append(f"stopped {name.removesuffix('.json')} (pid {pid})")
        path.unlink(missing_ok=True)
    return done
