"""The embedded deployment's lifecycle with real processes: `smartune serve` starts a Ray head and stops
it at exit; another deployment never attaches to it unless it names it (RAY_ADDRESS and its token), and then
leaves it running; a head left behind by a crashed service is reused by the next start and stopped by
`smartune stop`; a head without token auth is refused. Two deployments side by side: test_shared_host.py."""

from __future__ import annotations

import http.server
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.engine.local_head import HeadNotOurs, check_auth
from tests.support.cluster import RAY_PORT_FLAGS, base_env, free_port


def _wait(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code < 500
    except httpx.HTTPError:
        return False


@pytest.fixture
def ray_env() -> Iterator[dict[str, str]]:
    """Settings for a local head on free ports, in a short temp folder (Ray's sockets live there)."""
    tmp = Path(tempfile.mkdtemp(prefix="st-lh-"))
    ports = {flag: free_port() for flag in RAY_PORT_FLAGS}
    extra = " ".join(
        f"{flag}={port}" for flag, port in ports.items() if flag not in ("--port", "--dashboard-port")
    )
    env = {k: v for k, v in base_env().items() if not k.startswith("SMARTUNE_")}
    env |= {
        "SMARTUNE_RAY_DASHBOARD_PORT": str(ports["--dashboard-port"]),
        "SMARTUNE_RAY_HEAD_PORT": str(ports["--port"]),
        "SMARTUNE_RAY_TEMP_DIR": str(tmp / "ray"),
        "SMARTUNE_RAY_NUM_CPUS": "1",
        "SMARTUNE_RAY_START_ARGS": extra,
        "SMARTUNE_SCHEDULER_INTERVAL_S": "30",
    }
    yield env
    shutil.rmtree(tmp, ignore_errors=True)


def _serve(env: dict[str, str], data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "cli.main", "serve", "--port", str(port), "--data-dir", str(data_dir)]
    log = (data_dir.parent / f"serve-{port}.log").open("w")
    process = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    _wait(lambda: _answers(f"{url}/healthz") or process.poll() is not None, 180, "the service")
    assert process.poll() is None, Path(log.name).read_text()[-3000:]
    return process, url


def _stop_cli(data_dir: Path, env: dict[str, str]) -> str:
    cmd = [sys.executable, "-m", "cli.main", "stop", "--data-dir", str(data_dir)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, timeout=180).stdout


def test_serve_stops_its_head_another_deployment_gets_no_attach_and_a_crash_is_recovered(
    ray_env: dict[str, str], tmp_path: Path
) -> None:
    """A second deployment given the first one's ports is refused, naming the variable (it never attaches to
    a head it did not start); one that names the head (RAY_ADDRESS and the first's token file) uses it and
    leaves it running. The first service crashes: its head survives, the next start reuses it by its run
    record, and after a second crash `smartune stop` stops it."""
    dashboard = f"http://127.0.0.1:{ray_env['SMARTUNE_RAY_DASHBOARD_PORT']}"
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first, url = _serve(ray_env, first_dir)
    second: subprocess.Popen[str] | None = None
    try:
        assert (first_dir / "run" / "ray-head.json").is_file() and (
            first_dir / "run" / "serve.json"
        ).is_file()
        assert httpx.get(f"{url}/readyz", timeout=10).json()["ray"] == "ok"
        cmd = [
            sys.executable,
            "-m",
            "cli.main",
            "serve",
            "--port",
            str(free_port()),
            "--data-dir",
            str(second_dir),
        ]
        refused = subprocess.run(cmd, env=ray_env, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "smartune serve: error: SMARTUNE_RAY_HEAD_PORT: port" in refused.stderr, refused.stderr
        assert "RAY_ADDRESS" in refused.stderr and not (second_dir / "run" / "ray-head.json").exists()
        # Named outright, the head is used and, at exit, left running.
        named = ray_env | {"RAY_ADDRESS": dashboard, "RAY_AUTH_TOKEN_PATH": str(first_dir / "ray-auth-token")}
        second, second_url = _serve(named, second_dir)
        assert httpx.get(f"{second_url}/readyz", timeout=10).json()["ray"] == "ok"
        assert not (second_dir / "run" / "ray-head.json").exists()
        second.send_signal(signal.SIGTERM)
        assert second.wait(60) == 0  # a clean exit on SIGTERM
        assert _answers(f"{dashboard}/api/version")
        # The first service crashes: its head (its own session) survives it, recorded; the next start
        # reuses it...
        first.kill()
        first.wait(30)
        assert _answers(f"{dashboard}/api/version")
        first, _ = _serve(ray_env, first_dir)
        said = "".join(log.read_text() for log in tmp_path.glob("serve-*.log"))
        assert f"reusing this deployment's Ray head at {dashboard}" in said, said
        first.kill()
        first.wait(30)
        # ...and `smartune stop` stops it.
        said = _stop_cli(first_dir, ray_env)
        assert "stopped ray-head" in said, said
        _wait(lambda: not _answers(f"{dashboard}/api/version"), 60, "the head to stop")
        assert not (first_dir / "run" / "ray-head.json").exists()
    finally:
        first.kill()
        if second is not None:
            second.kill()
        _stop_cli(first_dir, ray_env)


def test_serve_stopped_cleanly_stops_the_head_it_started(ray_env: dict[str, str], tmp_path: Path) -> None:
    dashboard = f"http://127.0.0.1:{ray_env['SMARTUNE_RAY_DASHBOARD_PORT']}/api/version"
    data_dir = tmp_path / "data"
    process, _url = _serve(ray_env, data_dir)
    try:
        said = _stop_cli(data_dir, ray_env)  # SIGTERM to the service: it stops its head on the way out
        assert "stopped serve" in said, said
        assert process.wait(120) == 0
        assert not _answers(dashboard)
        assert not (data_dir / "run" / "ray-head.json").exists()
    finally:
        process.kill()
        _stop_cli(data_dir, ray_env)


class _Anonymous(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"version": "4"}')

    def log_message(self, *_args: object) -> None:
        pass


class _OtherToken(_Anonymous):
    def do_GET(self) -> None:  # noqa: N802
        self.send_response(401)
        self.end_headers()


@pytest.mark.parametrize(("handler", "said"), [(_Anonymous, "without a token"), (_OtherToken, "refuses")])
def test_a_head_without_the_expected_auth_is_not_reused(handler: type, said: str) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(HeadNotOurs, match=said):
            check_auth(f"http://127.0.0.1:{server.server_address[1]}", token="ours")
    finally:
        server.shutdown()


def test_the_recorded_pid_is_signalled_only_while_it_runs_the_recorded_program(tmp_path: Path) -> None:
    from service.engine.run_records import run_dir, stop_recorded

    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        run_dir(tmp_path).mkdir(parents=True)
        (run_dir(tmp_path) / "ray-head.json").write_text(
            f'{{"pid": {sleeper.pid}, "address": "x", "cmdline": "ray start --head --block"}}'
        )
        assert stop_recorded(tmp_path) == []  # the pid now runs `sleep`: a reused pid is left alone
        assert sleeper.poll() is None
        assert not (run_dir(tmp_path) / "ray-head.json").exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_planned_stops_requeue_a_running_job_without_counting_as_losses(
    ray_env: dict[str, str], tmp_path: Path, glue_dir: Path
) -> None:
    """With `max_attempts` 1, one loss would fail the job. It runs through two planned stops: `smartune
    stop` (the service stops its head and requeues), then a crash of the service and `smartune stop`
    (which stops the head left behind and requeues); each start resumes it as the next attempt."""
    from tests.integration.client import FINAL, ONE_TRIAL, Api, tiny_spec
    from tests.support.cluster import Server

    env = ray_env | {
        "SMARTUNE_SCHEDULER_INTERVAL_S": "0.5",
        "SMARTUNE_ENTRYPOINT_PYTHON": sys.executable,
        "SMARTUNE_MAX_ATTEMPTS": "1",
        "SMARTUNE_GLUE_DIR": str(glue_dir),
    }
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    port = free_port()
    server = Server(url=f"http://127.0.0.1:{port}", data_dir=data_dir, env=env, port=port).start()
    try:
        admin = Api(server, server.admin_key())
        api = Api(server, admin.team_key("nlp"))
        # Epochs enough to outlive both stops: attempt 1 runs on while `smartune stop` starts (a few epochs of
        # about a second), attempt 2 while the head left behind is stopped; attempt 3 trains the rest.
        training = {**tiny_spec()["training"], "epochs": 20, "max_train_samples": 128}
        job_id = api.submit(tiny_spec(training=training, search_space=ONE_TRIAL, method="vanilla"))

        api.wait(job_id, lambda j: any((t["last_epoch"] or 0) >= 1 for t in j["trials"]), 240)
        assert "stopped serve" in _stop_cli(data_dir, env)  # the service stops its head, then requeues
        assert server.process is not None and server.process.wait(120) == 0
        assert "requeued 1 running job(s)" in server.output()
        server.start()
        api.wait(job_id, lambda j: j["attempt"] == 2 and j["state"] == "RUNNING", 240)
        assert server.process is not None
        server.process.kill()  # a crash: the head is left behind, running attempt 2
        server.process.wait(30)
        said = _stop_cli(data_dir, env)
        assert "stopped ray-head" in said and "requeued 1 running job(s)" in said, said
        server.start()
        job = api.wait(job_id, lambda j: j["state"] in FINAL, timeout=300, past_the_end=True)
        assert job["state"] == "SUCCEEDED", job["message"]
        assert [(a["number"], a["state"]) for a in job["attempts"]] == [
            (1, "STOPPED"),
            (2, "STOPPED"),
            (3, "SUCCEEDED"),
        ]
        assert "planned stop" in job["attempts"][0]["message"]
        assert [(t["state"], t["last_epoch"]) for t in job["trials"]] == [("TERMINATED", 20)]
    finally:
        server.stop()
        _stop_cli(data_dir, env)
