"""A Docker engine for the compose stack test (tests/integration/test_compose_stack.py) and `make
deploy-test`, made ready idempotently: Debian's `docker.io` installed and `dockerd` started when no engine
answers (as root only), and a base image built once from Debian's own packages (debootstrap) where no image
registry can be reached, then reused by its tag. What cannot be made ready raises EngineUnavailable with the
reason (the test skips with it).

    python -m tests.support.docker_engine     # engine + base image; prints what it did

The engine is left running on purpose (other runs reuse it and its layer cache); this module starts it in
its own session and never stops it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.image_replay import find_links

REPO = Path(__file__).resolve().parents[2]
# The base of every test image: Debian bookworm (minbase) with its Python 3.11, the same Debian release and
# Python minor as the public `python:3.11-slim-bookworm` the Dockerfiles name by default.
BASE_IMAGE = "smartune-build/debian-python:bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "passwd", "ca-certificates")
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DOCKERD_LOG = Path("/var/log/smartune-dockerd.log")
# The torch CPU build for the worker's test variant (deploy/worker.Dockerfile, TORCH_REQUIREMENT): copied
# from pip's find-links folder into the build context, never downloaded (PyPI's Linux torch is the CUDA one).
TORCH_CPU_WHEEL = "torch-2.13.0+cpu-*.whl"
WHEELS = REPO / "deploy" / "wheels"
# What a cold build of the stack's images takes from the disk, measured on 1 Dec 2026: the six images
# (4.8 GB), BuildKit's cache (0.7 GB), apt's download of docker.io (now cleaned). A warm rebuild (every tag
# present) writes only the changed top layers: 2.7 GB when the service and worker sources had changed
# (out/compose_stack.json's build_disk_used_mb, stop 54), so a warm rebuild asks 3 GiB; CI always builds cold.
COLD_BUILD_BYTES, WARM_BUILD_BYTES = 8 << 30, 3 << 30
# Ray refuses to create an object that must spill to a disk over 95% full (its local_fs_capacity_threshold),
# and the rest of the suite runs Ray beside the builds, on the same disk where /tmp shares it.
RAY_FULL_FRACTION = 0.95


class EngineUnavailable(RuntimeError):
    """No engine can be started here; the message says why."""


def _run(argv: list[str], what: str, timeout: float = 900, **kw: object) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise EngineUnavailable(
            f"{what} failed (exit {done.returncode}): {(done.stdout + done.stderr)[-2000:]}"
        )
    return str(done.stdout)


def engine_version() -> str | None:
    """The engine's version, or None when no engine answers the CLI."""
    if shutil.which("docker") is None:
        return None
    done = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True,
                          text=True, timeout=30, check=False)  # fmt: skip
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def _install_engine() -> None:
    if os.geteuid() != 0:
        raise EngineUnavailable("no Docker engine answers and this user is not root (cannot install one)")
    if shutil.which("apt-get") is None:
        raise EngineUnavailable(
            "no Docker engine answers and there is no apt-get to install Debian's docker.io"
        )
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    _run(["apt-get", "update", "-qq"], "apt-get update", env=env)
    packages = ["docker.io", "debootstrap"] + ([] if shutil.which("docker") else ["docker-cli"])
    _run(["apt-get", "install", "-y", "-qq", *packages], f"apt-get install {' '.join(packages)}", env=env)
    _run(["apt-get", "clean"], "apt-get clean", env=env)  # the downloaded packages, off the disk


def ensure_engine(timeout: float = 90) -> str:
    """An engine that answers (installed and started if need be); returns its version."""
    version = engine_version()
    if version:
        return version
    if shutil.which("dockerd") is None or shutil.which("debootstrap") is None:
        _install_engine()
    if os.geteuid() != 0:
        raise EngineUnavailable("dockerd is installed but not running, and only root can start it")
    with DOCKERD_LOG.open("ab") as log:  # its own session: it outlives this process, as intended
        subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        version = engine_version()
        if version:
            return version
        time.sleep(1)
    raise EngineUnavailable(
        f"dockerd did not answer within {timeout:.0f} s: {DOCKERD_LOG.read_text()[-2000:]}"
    )


def image_exists(tag: str) -> bool:
    return (
        subprocess.run(["docker", "image", "inspect", tag], capture_output=True, check=False).returncode == 0
    )


def docker_root() -> Path:
    """The engine's data folder (`docker info`'s DockerRootDir): where images and build caches are written."""
    said = subprocess.run(["docker", "info", "--format", "{{.DockerRootDir}}"], capture_output=True, text=True,
                          timeout=60, check=False).stdout.strip()  # fmt: skip
    return Path(said) if said else Path("/var/lib/docker")


def check_disk_room(tags: list[str], root: Path | None = None) -> None:
    """Raises EngineUnavailable when building the images `tags` names would leave the disk under the engine's
    root more than 95% full: on a host whose disk is nearly full (CI's is shared), the builds would take the
    rest of the suite down with them (Ray stops creating objects, SQLite and logs fail with ENOSPC)."""
    where = root or docker_root()
    needed = WARM_BUILD_BYTES if all(image_exists(tag) for tag in tags) else COLD_BUILD_BYTES
    usage = shutil.disk_usage(where if where.exists() else where.parent)
    floor = int(usage.total * (1 - RAY_FULL_FRACTION))
    if usage.free - needed < floor:
        raise EngineUnavailable(
            f"the disk under {where} has {usage.free / 2**30:.1f} GiB free of {usage.total / 2**30:.0f} GiB; "
            f"building the stack's images takes about {needed / 2**30:.0f} GiB and would leave less than the "
            f"{floor / 2**30:.1f} GiB (5%) below which Ray refuses to spill objects for the rest of the suite"
        )


def ensure_base_image(tag: str = BASE_IMAGE) -> float:
    """The debootstrap base image, built when its tag is missing; returns the seconds spent (0: cached).
    It carries this host's CA bundle and pip configuration, so that builds on it reach Debian's mirror and
    the Python package index as this host does (a certificate-inspecting proxy included)."""
    if image_exists(tag):
        return 0.0
    if shutil.which("debootstrap") is None:
        _install_engine()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="smartune-rootfs-") as folder:
        rootfs = Path(folder) / "bookworm"
        include = ",".join(BASE_PACKAGES)
        _run(["debootstrap", "--variant=minbase", f"--include={include}", "bookworm", str(rootfs), DEBIAN_MIRROR],
             "debootstrap bookworm", timeout=1800)  # fmt: skip
        host_bundle = Path("/etc/ssl/certs/ca-certificates.crt")
        if host_bundle.is_file():  # kept by update-ca-certificates when an image installs ca-certificates
            shutil.copyfile(host_bundle, rootfs / "usr/local/share/ca-certificates/host-bundle.crt")
            shutil.copyfile(host_bundle, rootfs / "etc/ssl/certs/ca-certificates.crt")
        if Path("/etc/pip.conf").is_file():
            shutil.copyfile("/etc/pip.conf", rootfs / "etc/pip.conf")
        shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
        (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True)
        shutil.rmtree(rootfs / "var/lib/apt/lists", ignore_errors=True)
        (rootfs / "var/lib/apt/lists/partial").mkdir(parents=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(["docker", "import", "--change", 'CMD ["bash"]', "-", tag], stdin=tar.stdout,
                                  capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
        assert tar.stdout is not None
        tar.stdout.close()
        tar.wait()
        if imported.returncode != 0:
            raise EngineUnavailable(f"docker import {tag} failed: {imported.stderr[-2000:]}")
    return time.monotonic() - started


def stage_torch_cpu_wheel() -> Path:
    """The torch CPU wheel in deploy/wheels/ (git-ignored), from pip's find-links folders; hard-linked
    when it can be (same file system), copied otherwise."""
    staged = sorted(WHEELS.glob(TORCH_CPU_WHEEL))
    if staged:
        return staged[-1]
    for link in find_links():
        folder = Path(link.removeprefix("file://"))
        found = sorted(folder.glob(TORCH_CPU_WHEEL)) if folder.is_dir() else []
        if found:
            target = WHEELS / found[-1].name
            try:
                os.link(found[-1], target)
            except OSError:
                shutil.copyfile(found[-1], target)
            return target
    raise EngineUnavailable(
        f"no {TORCH_CPU_WHEEL} in pip's find-links ({find_links() or 'none set'}): the worker's CPU image "
        "installs torch from that wheel (PyPI's Linux torch is the CUDA build)"
    )


def main() -> int:
    try:
        version = ensure_engine()
        print(f"docker engine {version}")
        seconds = ensure_base_image()
        print(f"base image {BASE_IMAGE}: " + (f"built in {seconds:.0f} s" if seconds else "cached"))
        print(f"torch CPU wheel: {stage_torch_cpu_wheel().relative_to(REPO)}")
    except EngineUnavailable as err:
        print(f"no Docker engine: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
