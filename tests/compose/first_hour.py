"""docs/deployment.md's "A team's first hour", run for real on the compose stack and printed as a transcript.

`python -m tests.compose.first_hour [OUT_DIR]` (as root, after `python -m tests.support.docker_engine` and the
images of `make deploy-test`): the stack up with the test override (tests/support/compose_stack.py), the
admin key, a team, a dataset pushed, a job submitted and watched, its results and models, the team's MLflow
login tried on its own and another team's experiment through the `ui` profile's server, a webhook refused
at a private address and accepted once the deployment allows that network, a second job's delivery
received on this host. Every command and its output goes to stdout and OUT_DIR/transcript.txt; the stack is
taken down at the end. Not a test: what the docs show, re-measured on demand.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.cluster import free_port
from tests.support.compose_stack import COMPOSE_FILES, PROJECT, REPO, ComposeStack, compose_binary, env_file

SMARTUNE = str(REPO / ".venv" / "bin" / "smartune")
GLUE_RTE = Path(os.environ.get("SMARTUNE_GLUE_DIR", REPO.parent / "shared" / "data" / "glue")) / "RTE"
FIRST_JOB = """name: first-job
task: rte
model: minilm-l6
data: dataset:rte-small
search_space:
  preset: quick          # method: [vanilla, smart], 1 epoch
training:
  batch_size: 16
  learning_rate: 5.0e-5
  max_seq_length: 128
seeds: [1]
resources:
  cpus: 1
"""


class Transcript:
    def __init__(self, out: Path, stack: ComposeStack) -> None:
        self.out, self.stack = out, stack
        self.file = (out / "transcript.txt").open("w")
        self.env = os.environ | {"SMARTUNE_URL": stack.url}

    def say(self, text: str) -> None:
        print(text, flush=True)
        self.file.write(text + "\n")
        self.file.flush()

    def host(self, command: str, shown: str | None = None) -> str:
        """A team member's command on this host (the CLI, the API's published port)."""
        started = time.monotonic()
        done = subprocess.run(command, shell=True, capture_output=True, text=True, env=self.env, cwd=self.out)
        self.say(f"$ {shown or command}\n{(done.stdout + done.stderr).rstrip()}\n"
                 f"# exit {done.returncode}, {time.monotonic() - started:.0f} s")  # fmt: skip
        return done.stdout

    def admin(self, *argv: str) -> str:
        """An admin's command in the API container."""
        started = time.monotonic()
        done = self.stack.exec("api", *argv)
        self.say(f"$ docker compose exec api {shlex.join(argv)}\n{(done.stdout + done.stderr).rstrip()}\n"
                 f"# exit {done.returncode}, {time.monotonic() - started:.0f} s")  # fmt: skip
        return done.stdout


def up(stack: ComposeStack, timeout: float = 900) -> float:
    """`up --wait`, again until /readyz answers (Compose 2.40 on a 20.10 engine reports success regardless)."""
    started = time.monotonic()
    stack.up()
    while time.monotonic() - started < timeout:
        try:
            if httpx.get(stack.url + "/readyz", timeout=5).status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        stack.compose("up", "--detach", "--no-build", "--pull", "never", check=False)
        time.sleep(10)
    raise TimeoutError("the stack's API never became ready")


def receiver() -> tuple[int, list[dict[str, Any]]]:
    """A webhook receiver on this host (all interfaces): its port and what it received."""
    received: list[dict[str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the handler's protocol)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append({"headers": dict(self.headers), "body": json.loads(body)})
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_: object) -> None: ...

    server = http.server.ThreadingHTTPServer(("0.0.0.0", free_port()), Handler)  # noqa: S104 (containers call it)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1], received


def with_ui(env_path: Path) -> list[str]:
    """`docker compose` for the stack with the `ui` profile's MLflow UI too."""
    compose = [compose_binary(), "--project-name", PROJECT, "--project-directory", str(REPO), "--env-file",
               str(env_path), "--profile", "cpu", "--profile", "ui"]  # fmt: skip
    return compose + [part for path in COMPOSE_FILES for part in ("--file", str(path))]


def job_id(printed: str) -> str:
    found = re.search(r"job-[0-9a-f]+", printed)
    if found is None:
        raise RuntimeError(f"no job id in {printed!r}")
    return found.group(0)


def walk(t: Transcript, env_path: Path) -> None:
    t.say(f"# up --wait and /readyz: {up(t.stack):.0f} s")
    t.say(t.stack.compose("ps", "--format", "table {{.Service}}\t{{.Status}}").stdout)
    t.env["SMARTUNE_API_KEY"] = t.admin("cat", "/var/lib/smartune/admin-key").strip()
    t.host(f"{SMARTUNE} teams", "smartune teams")
    t.env["SMARTUNE_API_KEY"] = t.admin(
        "smartune", "admin", "create-team", "nlp", "--cpus", "4", "--gpus", "0"
    ).split()[0]
    data = t.out / "rte-small"
    data.mkdir(exist_ok=True)
    for split, rows in (("train", 256), ("dev", 64)):
        lines = (GLUE_RTE / f"{split}.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
        (data / f"{split}.tsv").write_text("".join(lines[: rows + 1]), encoding="utf-8")  # and the header
    t.host(f"{SMARTUNE} data push rte-small --name rte-small --task rte --no-progress",
           "smartune data push rte-small/ --name rte-small --task rte")  # fmt: skip
    (t.out / "first-job.yaml").write_text(FIRST_JOB)
    t.host(f"{SMARTUNE} submit first-job.yaml --estimate", "smartune submit first-job.yaml --estimate")
    first = job_id(t.host(f"{SMARTUNE} submit first-job.yaml", "smartune submit first-job.yaml"))
    t.host(f"{SMARTUNE} status {first} --watch", f"smartune status {first} --watch")
    t.host(f"{SMARTUNE} results {first}", f"smartune results {first}")
    t.host(f"{SMARTUNE} models", "smartune models")

    login = t.admin("smartune", "admin", "mlflow-login", "nlp")
    user, password = (re.search(rf"{name}=(\S+)", login).group(1) for name in ("USERNAME", "PASSWORD"))  # type: ignore[union-attr]
    ui_port = free_port()
    with env_path.open("a") as env:
        env.write(f"MLFLOW_UI_PORT={ui_port}\n")
    compose = with_ui(env_path)
    started = time.monotonic()
    subprocess.run([*compose, "up", "--detach", "--wait", "--no-build", "--pull", "never", "mlflow-ui"], check=True,
                   capture_output=True)  # fmt: skip
    t.say(
        f"$ docker compose --profile cpu --profile ui up -d --wait mlflow-ui\n# {time.monotonic() - started:.0f} s"
    )
    t.admin("smartune", "admin", "create-team", "vision", "--cpus", "1", "--gpus", "0")
    time.sleep(15)  # the engine makes a new team's MLflow user and experiment at its next round
    for experiment in ("smartune-nlp", "smartune-vision"):
        url = (
            f"http://127.0.0.1:{ui_port}/api/2.0/mlflow/experiments/get-by-name?experiment_name={experiment}"
        )
        t.host(f"curl -s -o /dev/null -w '%{{http_code}}\\n' -u {user}:{password} '{url}'",
               f"curl -s -o /dev/null -w '%{{http_code}}\\n' -u {user}:$PASSWORD '{url}'")  # fmt: skip

    port, received = receiver()
    network = json.loads(subprocess.run(["docker", "network", "inspect", f"{PROJECT}_default"], capture_output=True,
                                        text=True, check=True).stdout)  # fmt: skip
    gateway = network[0]["IPAM"]["Config"][0]["Gateway"]
    hook = f"http://{gateway}:{port}/hooks/smartune"
    add = f"{SMARTUNE} webhooks add {hook} --event job.succeeded --event job.failed"
    t.host(add, add.replace(SMARTUNE, "smartune"))
    with env_path.open("a") as env:
        env.write(f"SMARTUNE_WEBHOOK_ALLOW_CIDRS={gateway.rsplit('.', 2)[0]}.0.0/16\n")
    started = time.monotonic()
    t.stack.compose("up", "--detach", "--wait", "--no-build", "--pull", "never", "api", timeout=600)
    t.say(f"# api restarted with SMARTUNE_WEBHOOK_ALLOW_CIDRS: {time.monotonic() - started:.0f} s")
    t.host(add, add.replace(SMARTUNE, "smartune"))
    second = job_id(t.host(f"{SMARTUNE} submit first-job.yaml", "smartune submit first-job.yaml"))
    t.host(f"{SMARTUNE} status {second} --watch", f"smartune status {second} --watch")
    deadline = time.monotonic() + 120
    while not received and time.monotonic() < deadline:
        time.sleep(1)
    t.say("# received: " + json.dumps(received, indent=1))
    t.host(f"{SMARTUNE} webhooks deliveries 1", "smartune webhooks deliveries 1")


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env_path = env_file(out, free_port())
    stack = ComposeStack(env_path, int(re.search(r"SMARTUNE_PORT=(\d+)", env_path.read_text()).group(1)))  # type: ignore[union-attr]
    transcript = Transcript(out, stack)
    try:
        walk(transcript, env_path)
    finally:
        transcript.say(stack.logs("api", tail=30))
        subprocess.run([*with_ui(env_path), "down", "--volumes", "--remove-orphans", "--timeout", "20"],
                       capture_output=True, check=False)  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "out" / "first_hour")
