"""Each image's Python environment, built natively from its own Dockerfile (no Docker engine), so the
Dockerfile stays the one source of what an image installs: a package it misses is missed here too. The
build replays its COPY and RUN steps (tests/support/image_replay.py: `pip install` as `uv pip install` with
the same arguments, the Dockerfile's own `python -c` checks included).

Cached as Docker caches layers: the steps before the first COPY of a source folder (the dependencies) make a
venv kept in `~/.cache/smartune-image-envs/<image>/` (SMARTUNE_IMAGE_ENV_CACHE elsewhere), rebuilt when its
key changes: a hash of those instructions, what the files COPY brought in by then say about dependencies
(pyproject.toml's dependency tables, requirements.lock; not the README, which is metadata), the Python and
uv versions and the local wheels. From that COPY on (`pip install --no-deps .`, the checks) every build
replays the steps, on a fresh copy of the sources. A build holds the image's lock until `release()`: a
second session waits rather than change the venv under the first."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tests.support.dockerfile import DOCKERFILES, REPO, instructions
from tests.support.image_replay import NOT_INHERITED, ImageBuildError, Replay, copy_sources, find_links
from tests.support.image_replay import python_version as base_python

FORMAT = "1"  # part of the cache key: bump it when the replay itself changes
NOT_INHERITED_PREFIXES = ("SMARTUNE_", "MLFLOW_", "AWS_")  # the harness's settings stay out of the roles
DONE = "complete.json"  # the dependency layer's key, written once the layer is complete
# What the dependency steps read of pyproject.toml (the rest is metadata or tool settings).
DEPENDENCY_TABLES = (("build-system",), ("project", "requires-python"), ("project", "dependencies"),
                     ("project", "optional-dependencies"), ("dependency-groups",))  # fmt: skip


def cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(os.environ.get("SMARTUNE_IMAGE_ENV_CACHE") or base / "smartune-image-envs")


def uv_binary() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if found is None:
        raise ImageBuildError("uv is missing: install the dev extra (`pip install -e '.[dev]'`, it has uv)")
    return found


@dataclass
class ImageEnv:
    """One image's environment: a venv built by replaying its Dockerfile, and the staged build context."""

    image: str
    root: Path  # the venv (the image's /opt/venv, or the MLflow image's system Python)
    context: Path  # the staged image file system: what COPY put where (`context / "src"` is WORKDIR /src)
    seconds: float  # wall time of this build
    cached: bool  # whether the dependency layer came from the cache
    steps: list[str]  # each replayed command, as run, with its seconds
    lock: IO[Any] | None = field(default=None, repr=False)

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> str:
        return str(self.bin / "python")

    def release(self) -> None:
        if self.lock is not None:
            self.lock.close()  # and with it the flock
            self.lock = None

    def process_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of a process of this image: its venv first on PATH, none of the test's code."""
        env = {name: value for name, value in os.environ.items()
               if name not in NOT_INHERITED and not name.startswith(NOT_INHERITED_PREFIXES)}  # fmt: skip
        env["PATH"] = f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.root)
        return env | (extra or {})

    def failed_imports(self, modules: dict[str, str]) -> list[str]:
        """ "<image> image: `import M` failed (...)" for each module (-> what needs it) that does not import."""
        probe = ("import importlib, json, sys\nfailed = {}\nfor name in sys.argv[1:]:\n    try:\n"
                 "        importlib.import_module(name)\n    except Exception as err:\n"
                 "        failed[name] = f'{type(err).__name__}: {err}'\nprint(json.dumps(failed))\n")  # fmt: skip
        done = subprocess.run([self.python, "-c", probe, *modules], cwd=self.root, env=self.process_env(),
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        if done.returncode != 0:
            return [f"{self.image} image: the import probe failed: {done.stderr[-2000:]}"]
        failed: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
        return [f"{self.image} image: `import {name}` failed ({error}); needed for {modules[name]}"
                for name, error in failed.items()]  # fmt: skip


def dependency_key(image: str, uv: str) -> str:
    """What the cached layer depends on: the instructions before the first COPY of a source folder, what the
    files COPY brought in by then say about dependencies, the Python and uv versions, the local wheels."""
    digest = hashlib.sha256(f"{FORMAT}\n{image}\n".encode())
    for keyword, arguments in instructions(DOCKERFILES[image]):
        if _starts_sources(keyword, arguments):
            break
        copied = copy_sources(arguments) if keyword in {"COPY", "ADD"} else None
        digest.update(f"{keyword} {arguments}\n".encode())
        if keyword == "FROM":
            digest.update(base_python(arguments.split()[0]).encode())
        for source in copied[0] if copied else []:
            digest.update(_dependency_content(REPO / source))
    version = subprocess.run([uv, "--version"], capture_output=True, text=True, check=True).stdout
    wheels = sorted(p.name for link in find_links() if Path(link).is_dir() for p in Path(link).iterdir())
    digest.update(f"{version}\n{wheels}\n{sys.version}".encode())
    return digest.hexdigest()[:16]


def build(image: str, work: Path) -> ImageEnv:
    """Replay deploy/<image>.Dockerfile's Python steps; the staged context goes to `work` (a new folder)."""
    started = time.monotonic()
    uv = uv_binary()
    entry = cache_root() / image
    entry.parent.mkdir(parents=True, exist_ok=True)
    lock = open(f"{entry}.lock", "a")  # noqa: SIM115 (held by the ImageEnv until release())
    fcntl.flock(lock, fcntl.LOCK_EX)  # another session building or using this entry: wait for it
    try:
        key = dependency_key(image, uv)
        cached = (entry / DONE).is_file() and json.loads((entry / DONE).read_text())["key"] == key
        if not cached:
            shutil.rmtree(entry, ignore_errors=True)  # another key, or a build that stopped half way
        replay = Replay(image, entry / "venv", work, uv, skip=cached)
        for keyword, arguments in instructions(DOCKERFILES[image]):
            if not cached and _starts_sources(keyword, arguments):
                _mark_done(entry, key, replay.steps)  # the dependency layer is complete
            replay.instruction(keyword, arguments)
        if not cached:  # (again: the MLflow image copies no source folder, so all of it is the layer)
            _mark_done(entry, key, replay.steps)
    except BaseException:
        lock.close()
        raise
    return ImageEnv(image, entry / "venv", work, time.monotonic() - started, cached, replay.steps, lock)


def _dependency_content(path: Path) -> bytes:
    """What a copied file says about dependencies: pyproject.toml's dependency tables, no README (the
    project's metadata, read by `pip install .` only, which is replayed every time), any other file whole."""
    if path.name == "pyproject.toml":
        tables = tomllib.loads(path.read_text())
        picked = {".".join(keys): _dig(tables, keys) for keys in DEPENDENCY_TABLES}
        return json.dumps(picked, sort_keys=True).encode()
    if path.name == tomllib.loads((REPO / "pyproject.toml").read_text())["project"].get("readme"):
        return b""
    return path.read_bytes()


def _dig(tables: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        tables = tables.get(key, {})
    return tables


def _starts_sources(keyword: str, arguments: str) -> bool:
    copied = copy_sources(arguments) if keyword in {"COPY", "ADD"} else None
    return bool(copied and any((REPO / source).is_dir() for source in copied[0]))


def _mark_done(entry: Path, key: str, steps: list[str]) -> None:
    if not (entry / DONE).exists():
        entry.mkdir(parents=True, exist_ok=True)
        (entry / DONE).write_text(json.dumps({"key": key, "steps": steps}, indent=1))
