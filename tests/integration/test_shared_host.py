"""Two deployments on one host under one account (issue 30): two `smartune serve` with their own data dirs
and the same HOME, whose `~/.ray/auth_token` they would once have shared, each start a head of their own
(ports, temp dir, token); neither sees nor drives the other's Ray jobs; `smartune stop` of one leaves the
other's head running. (Reusing the head a deployment's own run record names: test_local_head.py.)

Ray's default ports are left unset, as `make run` leaves them: the first deployment takes them when free."""

from __future__ import annotations

import json
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.engine.head_plan import RAY_DEFAULT_PORTS
from tests.support.cluster import RAY_PORT_FLAGS, ProcessDied, base_env, free_port, stop_group, wait_for

CLI = [sys.executable, "-m", "cli.main"]
# Ray's default token auth file: every head started under this account once checked this one token.
ACCOUNT_TOKEN = "the-accounts-shared-token"


@pytest.fixture
def host() -> Iterator[tuple[Path, dict[str, str]]]:
    """A short folder (Ray's socket paths are limited) holding a HOME with the account's token file."""
    tmp = Path(tempfile.mkdtemp(prefix="st-sh-"))
    (tmp / "home" / ".ray").mkdir(parents=True)
    (tmp / "home" / ".ray" / "auth_token").write_text(ACCOUNT_TOKEN)
    env = {k: v for k, v in base_env().items() if not k.startswith(("SMARTUNE_", "RAY_AUTH_TOKEN"))}
    env |= {
        "HOME": str(tmp / "home"),
        "SMARTUNE_RAY_NUM_CPUS": "1",
        "SMARTUNE_RAY_NUM_GPUS": "0",
        "SMARTUNE_SCHEDULER_INTERVAL_S": "30",
    }
    yield tmp, env
    shutil.rmtree(tmp, ignore_errors=True)


class Deployment:
    def __init__(self, data_dir: Path, env: dict[str, str]) -> None:
        # Ray's default ports stay unset, as `make run` leaves them; the ports Ray otherwise picks at random
        # are given, as tests/support/cluster.py gives them to every head the tests start.
        others = [flag for flag in RAY_PORT_FLAGS if flag not in RAY_DEFAULT_PORTS]
        self.data_dir = data_dir
        self.env = env | {"SMARTUNE_RAY_START_ARGS": " ".join(f"{flag}={_quiet_port()}" for flag in others)}
        self.process: subprocess.Popen[str] | None = None
        self.log = data_dir.parent / f"{data_dir.name}.log"

    def serve(self) -> Deployment:
        port = _quiet_port()
        cmd = [*CLI, "serve", "--port", str(port), "--data-dir", str(self.data_dir)]
        out = self.log.open("a")
        self.process = subprocess.Popen(
            cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            if self.process is None or self.process.poll() is not None:
                raise ProcessDied(self.output()[-3000:])
            return httpx.get(f"{url}/readyz", timeout=2).json()["ray"] == "ok"

        wait_for(up, 120, f"smartune serve in {self.data_dir}")
        return self

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def diagnosis(self) -> str:
        """The ends of the service's and its head's logs (a head that died starting says so there)."""
        head_log = self.data_dir / "run" / "ray-head.log"
        said = head_log.read_text()[-1500:] if head_log.exists() else "(no head log)"
        return f"== {self.data_dir}: service\n{self.output()[-2000:]}\n== its head\n{said}"

    @property
    def head(self) -> dict[str, str]:
        return dict(json.loads((self.data_dir / "run" / "ray-head.json").read_text()))

    @property
    def token(self) -> str:
        return (self.data_dir / "ray-auth-token").read_text().strip()

    def stop(self) -> str:
        cmd = [*CLI, "stop", "--data-dir", str(self.data_dir)]
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=120).stdout


_GIVEN: set[int] = set()  # ports handed out, each once: two heads' flags are chosen before either binds


def _quiet_port() -> int:
    """A free port below the kernel's ephemeral range (and above Ray's worker ports, 10002-19999): the API
    binds it only after its head started, and a port from the ephemeral range (`free_port`) was by then
    sometimes taken by one of the many outgoing connections of the Ray processes on a busy machine."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in random.sample(range(20000, max(low, 20001)), min(200, max(low - 20000, 1))):
        if port in _GIVEN:
            continue
        _GIVEN.add(port)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return free_port()


def _get(url: str, token: str) -> httpx.Response:
    return httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=5)


def _down(address: str) -> bool:
    try:
        httpx.get(f"{address}/api/version", timeout=2)
    except httpx.HTTPError:
        return True
    return False


def test_two_deployments_on_one_account_run_their_own_heads(host: tuple[Path, dict[str, str]]) -> None:
    tmp, env = host
    first, second = Deployment(tmp / "a", env), Deployment(tmp / "b", env)
    try:
        first.serve()
        second.serve()
        a, b = first.head["address"], second.head["address"]
        gcs = [re.search(r"--port=(\d+)", d.head["cmdline"]) for d in (first, second)]
        assert a != b and gcs[0] and gcs[1] and gcs[0][1] != gcs[1][1], (first.head, second.head)
        assert f"--temp-dir={tmp / 'b' / 'ray'}" in second.head["cmdline"]
        said = second.output()
        assert "starting this deployment's own head on GCS port" in said, said
        assert f"not started from {tmp / 'b'}" in said, said
        assert len({first.token, second.token, ACCOUNT_TOKEN}) == 3

        # A Ray job on the first head: its driver connects to the cluster with the deployment's token.
        probe = f"{sys.executable} -c \"import ray; ray.init(); print('connected', ray.cluster_resources()['CPU'])\""
        submitted = httpx.post(
            f"{a}/api/jobs/",
            json={"entrypoint": probe, "submission_id": "shared-host-probe"},
            headers={"Authorization": f"Bearer {first.token}"},
            timeout=10,
        )
        assert submitted.status_code == 200, submitted.text
        job = f"{a}/api/jobs/shared-host-probe"
        wait_for(
            lambda: _get(job, first.token).json()["status"] in ("SUCCEEDED", "FAILED"), 90, "the probe job"
        )
        logs = _get(f"{job}/logs", first.token).json()["logs"]
        assert _get(job, first.token).json()["status"] == "SUCCEEDED" and "connected 1.0" in logs, logs
        assert "shared-host-probe" in {j["submission_id"] for j in _get(f"{a}/api/jobs/", first.token).json()}
        assert _get(f"{b}/api/jobs/", second.token).json() == []  # the other head lists no job of the first
        # Neither the second deployment's token nor the account's shared one drives the first's jobs.
        assert _get(f"{a}/api/jobs/", second.token).status_code in (401, 403)
        assert _get(f"{a}/api/jobs/", ACCOUNT_TOKEN).status_code in (401, 403)

        stopped = first.stop()
        assert "stopped serve" in stopped, stopped
        assert first.process is not None and first.process.wait(60) == 0
        wait_for(lambda: _down(a), 30, "the first head to stop")
        assert _get(f"{b}/api/version", second.token).status_code == 200  # the second's head runs on
        assert (tmp / "b" / "run" / "ray-head.json").is_file() and second.process is not None
        assert second.process.poll() is None

    except BaseException:
        print("\n".join(d.diagnosis() for d in (first, second)))  # noqa: T201 - shown with the failure
        raise
    finally:
        for deployment in (first, second):
            if deployment.process is not None:
                stop_group(deployment.process, timeout=60)  # a service stops its head on SIGTERM
            if (deployment.data_dir / "run" / "ray-head.json").exists():  # unless it had died
                deployment.stop()
