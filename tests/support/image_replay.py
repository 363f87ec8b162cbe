"""Replaying a Dockerfile's Python steps natively (tests/support/image_envs.py builds and caches with it):
COPY stages the build context into a folder laid out as the image's file system; RUN's commands are run in
order, `python -m venv` as `uv venv`, `pip install ARGS` as `uv pip install --compile-bytecode ARGS` (pip
compiles bytecode too), `python -c CODE [> FILE]` in the new environment, `rm` in the staged folder.

Two substitutions, both about torch: the worker image's CUDA wheel (`--index-url` of PyTorch's CUDA index)
becomes the CPU build from pip's configured find-links (this machine's local wheel of the pinned torch), or
from PyTorch's CPU index when none is configured; and the worker image's Python (Ubuntu 24.04's 3.12)
becomes this interpreter's version, the one the local torch wheel is built for. Commands that make no part
of the Python environment (apt-get, users, folders) are skipped by name; any other one fails the build, so
a new kind of step cannot be skipped unnoticed."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from tests.support.dockerfile import REPO, run_mounts, shell_commands

NOT_PYTHON = frozenset({"apt-get", "groupadd", "useradd", "install"})  # packages, users, folders
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# What a build step or an image's process must not inherit from the test process: its code on PYTHONPATH
# (the image has the installed project only), its venv, the harness's service settings.
NOT_INHERITED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "DATABASE_URL", "RAY_ADDRESS")


class ImageBuildError(RuntimeError):
    """A replayed step failed; the message starts with the image's name."""


def pip_setting(variable: str, key: str) -> str:
    """One pip setting as pip reads it: the environment variable (e.g. PIP_FIND_LINKS), else `pip config`'s
    `<section>.<key>` (e.g. `global.find-links`); "" when neither sets it."""
    configured = os.environ.get(variable, "")
    if not configured:
        listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                                text=True, check=False).stdout  # fmt: skip
        for line in listed.splitlines():
            name, _, value = line.partition("=")
            if name.endswith(f".{key}"):
                configured = value.strip("'\"")
    return configured


def find_links() -> list[str]:
    """pip's configured find-links (PIP_FIND_LINKS, else `pip config`): where the local torch wheel lies."""
    return [link for link in pip_setting("PIP_FIND_LINKS", "find-links").split() if link]


def python_version(base_image: str) -> str:
    """X.Y of a `python:X.Y-...` base image; otherwise (the worker's CUDA image) this interpreter's."""
    name, _, tag = base_image.partition(":")
    if name.rsplit("/", 1)[-1] == "python":
        return ".".join(tag.split("-")[0].split(".")[:2])
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def copy_sources(arguments: str) -> tuple[list[str], str] | None:
    """(sources, destination) of a COPY from the build context; None for one from another stage."""
    words = shlex.split(arguments)
    if any(word.startswith("--from") for word in words):
        return None
    *sources, destination = [word for word in words if not word.startswith("--")]
    return sources, destination


def _is_pip(requirement: str) -> bool:
    try:
        return Requirement(requirement).name.lower() == "pip"
    except InvalidRequirement:
        return False


class Replay:
    """One build: `venv` is the environment made, `context` the staged image file system. With `skip`,
    RUN steps are skipped until the first COPY of a source folder (the cached dependency layer)."""

    def __init__(self, image: str, venv: Path, context: Path, uv: str, *, skip: bool) -> None:
        self.image, self.venv, self.context, self.uv, self.skip = image, venv, context, uv, skip
        self.image_venv: str | None = None  # the venv's path in the image, once `python -m venv` made it
        self.python_version = f"{sys.version_info.major}.{sys.version_info.minor}"
        self.workdir = "/"
        self.steps: list[str] = []

    def inside(self, path: str) -> Path:
        """An image path in the staged file system (relative ones against WORKDIR)."""
        absolute = path if path.startswith("/") else f"{self.workdir.rstrip('/')}/{path}"
        return self.context / absolute.lstrip("/")

    def map_arg(self, arg: str) -> str:
        venv = self.image_venv
        if venv and (arg == venv or arg.startswith(venv + "/")):
            return str(self.venv) + arg[len(venv) :]
        return str(self.inside(arg)) if arg.startswith("/") else arg

    def run(self, argv: list[str], what: str, stdout: Path | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
        started = time.monotonic()
        done = subprocess.run(
            argv, cwd=self.inside("."), env=env, capture_output=True, text=True, timeout=1800
        )
        self.steps.append(f"{shlex.join(argv)}  ({time.monotonic() - started:.1f} s)")
        if done.returncode != 0:
            output = (done.stdout + done.stderr)[-3000:]
            raise ImageBuildError(f"{self.image} image: `{what}` failed (exit {done.returncode}):\n{output}")
        if stdout is not None:
            stdout.parent.mkdir(parents=True, exist_ok=True)
            stdout.write_text(done.stdout)

    def make_venv(self) -> None:
        if not (self.venv / "bin" / "python").exists():
            uv_venv = [self.uv, "venv", "--python", self.python_version, "--python-preference", "only-system"]
            self.run([*uv_venv, str(self.venv)], "python -m venv")

    def instruction(self, keyword: str, arguments: str) -> None:
        if keyword == "FROM":
            self.python_version = python_version(arguments.split()[0])
            self.workdir = "/"
        elif keyword == "WORKDIR":
            self.workdir = arguments if arguments.startswith("/") else f"{self.workdir}/{arguments}"
            self.inside(".").mkdir(parents=True, exist_ok=True)
        elif keyword in {"COPY", "ADD"}:
            self.copy(arguments)
        elif keyword == "RUN":
            mounts, command = run_mounts(arguments)
            for mount in mounts:  # a bind of the build context: the same folder, at the target
                target = self.inside(mount["target"])
                target.parent.mkdir(parents=True, exist_ok=True)
                if mount.get("type", "bind") == "bind" and not target.exists():
                    target.symlink_to(REPO / mount["source"], target_is_directory=True)
            for argv, stdout in shell_commands(command):
                self.command(argv, stdout)

    def copy(self, arguments: str) -> None:
        copied = copy_sources(arguments)
        if copied is None:
            return  # another stage's files: the same venv here
        sources, destination = copied
        for source in sources:
            origin = REPO / source
            target = self.inside(destination)
            if destination.endswith("/") or len(sources) > 1:
                target = target / origin.name
            target.parent.mkdir(parents=True, exist_ok=True)
            if origin.is_dir():
                self.skip = False  # the sources: from here on every step runs again
                shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__", "*.py[cod]"))
            else:
                shutil.copy2(origin, target)

    def command(self, argv: list[str], stdout: str | None) -> None:
        program = Path(argv[0]).name
        is_python = program in {"python", "python3"}
        if is_python and argv[1:3] == ["-m", "venv"]:
            self.image_venv = argv[3]
            if not self.skip:
                self.make_venv()
        elif self.skip or program in NOT_PYTHON:
            return
        elif program == "rm":
            for path in (arg for arg in argv[1:] if not arg.startswith("-")):
                Path(self.map_arg(path)).unlink(missing_ok=True)
        elif is_python and "-c" in argv:  # flags (-I) before it, the code after it
            self.make_venv()
            target = self.inside(stdout) if stdout else None
            self.run([str(self.venv / "bin" / "python"), *argv[1:]], shlex.join(argv), target)
        elif program in {"pip", "pip3"} and argv[1] == "install":
            self.pip_install(argv[2:])
        else:
            raise ImageBuildError(f"{self.image} image: cannot replay `{shlex.join(argv)}`")

    def pip_install(self, args: list[str]) -> None:
        if len(args) == 1 and _is_pip(args[0]):
            return  # pip upgrading itself (for `--group`): uv installs instead
        self.make_venv()
        translated: list[str] = []
        links = find_links()
        index = 0
        while index < len(args):
            if args[index] in {"--index-url", "-i"}:  # torch's CUDA index: the CPU build (module docstring)
                index += 1
                translated += [] if links else ["--index-url", TORCH_CPU_INDEX]
            else:
                translated.append(self.map_arg(args[index]))
            index += 1
        if "." in translated:
            translated.insert(
                0, "--reinstall"
            )  # the project itself: this build's sources, never a cached one
        uv = [self.uv, "pip", "install", "--compile-bytecode", "--python", str(self.venv / "bin" / "python")]
        uv += [part for link in links for part in ("--find-links", link)]
        self.run([*uv, *translated], "pip install " + shlex.join(args))
