"""The images' roles, run natively in their environments (tests/support/image_envs.py): a Ray head as the
worker image runs it, the API as the service image runs it (its migration first, as the compose prestart
step does), and what an image's code imports. Each process starts outside the repository, in its own
session, with none of the test's code on its path, and is stopped by its process group."""

from __future__ import annotations

import ast
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from service.engine.ray_jobs import auth_headers
from tests.support.cluster import ProcessDied, RayHead, Server, ray_ports, wait_for
from tests.support.dockerfile import REPO, image_command
from tests.support.image_envs import ImageEnv

OURS = frozenset({"smart_core", "worker", "service", "cli", "smartune", "bench", "research", "tests"})


def third_party_imports(*folders: str) -> dict[str, str]:
    """Every module of another distribution that the code under `folders` imports, at import time or lazily
    (-> the first file that does): what the image holding that code must be able to import."""
    found: dict[str, str] = {}
    for folder in folders:
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in OURS and top not in sys.stdlib_module_names:
                        found.setdefault(name, str(path.relative_to(REPO)))
    return found


def start_head_in(env: ImageEnv, node_env: dict[str, str], *, num_cpus: int) -> RayHead:
    """`ray start --head --block` from the worker image's environment, as compose's ray-head runs it (no
    GPU), on free ports and with token auth. Its jobs' `python` is the image's: its venv leads PATH."""
    tmp = Path(tempfile.mkdtemp(prefix="st-img-ray-"))  # short: Ray's AF_UNIX sockets live here
    process_env = env.process_env(node_env | {"RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0"})
    subprocess.run([str(env.bin / "ray"), "get-auth-token", "--generate"], env=process_env, cwd=tmp,
                   check=True, capture_output=True)  # fmt: skip
    ports = ray_ports()
    cmd = [str(env.bin / "ray"), "start", "--head", "--block", "--disable-usage-stats", "--num-gpus=0"]
    cmd += [f"--num-cpus={num_cpus}", "--dashboard-host=127.0.0.1", f"--temp-dir={tmp / 'ray'}"]
    cmd += [f"{flag}={port}" for flag, port in ports.items()]
    log = tmp / "ray-head.log"
    process = subprocess.Popen(cmd, cwd=tmp, env=process_env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                               start_new_session=True)  # fmt: skip
    address = f"http://127.0.0.1:{ports['--dashboard-port']}"

    def up() -> bool:
        if process.poll() is not None:
            raise ProcessDied(f"worker image: ray start exited:\n{log.read_text()[-3000:]}")
        return httpx.get(f"{address}/api/version", headers=auth_headers(), timeout=2).status_code == 200

    wait_for(up, 180, "worker image: the Ray head")
    return RayHead(address, process, log, ports, num_cpus, 0)


def start_api_in(env: ImageEnv, api_env: dict[str, str], prestart: list[str], data_dir: Path) -> Server:
    """The compose prestart command (`smartune migrate --wait ...`), then the service image's CMD, with
    `api_env` (compose's `api` environment, given native values); the working directory is the data dir, as
    the image's WORKDIR is."""
    data_dir.mkdir(parents=True, exist_ok=True)
    process_env = env.process_env(api_env)
    done = subprocess.run([str(env.bin / prestart[0]), *prestart[1:]], cwd=data_dir, env=process_env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    if done.returncode != 0:
        raise ProcessDied(
            f"service image: `{' '.join(prestart)}` failed:\n{(done.stdout + done.stderr)[-3000:]}"
        )
    cmd = image_command("service")
    log = data_dir.parent / "api.log"
    process = subprocess.Popen([str(env.bin / cmd[0]), *cmd[1:]], cwd=data_dir, env=process_env,
                               stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{api_env['SMARTUNE_PORT']}"
    server = Server(url, data_dir, process_env, int(api_env["SMARTUNE_PORT"]), process, [log])

    def up() -> bool:
        if process.poll() is not None:
            raise ProcessDied(f"service image: `{' '.join(cmd)}` exited:\n{log.read_text()[-3000:]}")
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200

    wait_for(up, 180, "service image: the API", interval=0.5)
    return server
