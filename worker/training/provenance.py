"""Provenance of a run (docs/architecture.md §6): code version, library versions, device, determinism, data digests
(files read, and the uploaded dataset's digest when the run read one)."""

from __future__ import annotations

import hashlib
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from worker.contract.sources import parse_dataset_ref
from worker.training.files import open_data

_LIBRARIES = ("torch", "transformers", "ray", "mlflow", "smartune")
_ROOT = Path(__file__).resolve().parent.parent


def code_version() -> dict[str, Any]:
    """git commit and dirty flag when run from a checkout, else the package version and a source hash."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=_ROOT, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=_ROOT,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout
        return {"git_commit": commit, "git_dirty": bool(status.strip())}
    except (OSError, subprocess.SubprocessError):
        digest = hashlib.sha256()
        for package in ("smart_core", "worker"):
            for path in sorted((_ROOT / package).rglob("*.py")):
                digest.update(path.read_bytes())
        return {"package_version": _version("smartune"), "source_sha256": digest.hexdigest()}


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def files_digest(paths: list[Path]) -> str:
    """sha256 over the named files' bytes, in the given order (the data a run read); each file is opened
    as the data loader opens it, so a file the loader would refuse is refused here too."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode())
        with open_data(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):  # noqa: B023 (used at once)
                digest.update(block)
    return digest.hexdigest()


def dataset_provenance(data: str | None) -> dict[str, str]:
    """`{"dataset_sha256": digest}` when `data` names an uploaded dataset (pinned to its digest by the
    control plane), else nothing: two runs on different uploads never record the same data."""
    try:
        ref = parse_dataset_ref(data) if data else None
    except ValueError:
        return {}
    return {"dataset_sha256": ref.digest} if ref is not None and ref.digest else {}


def environment(device: torch.device, deterministic: bool) -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        **{f"{name}_version": _version(name) for name in _LIBRARIES},
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "cpu",
        "torch_threads": torch.get_num_threads(),
        "deterministic": deterministic,
        **code_version(),
    }
