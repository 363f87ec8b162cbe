"""Trial checkpoints that a killed driver or trial cannot turn into a lost trial.

A trial's checkpoint is a folder in the sweep's Tune storage holding `trial_state.pt` (the whole
`TrainingSession` state and the epoch history) and `trial_state.json`, a manifest with the state file's
size and SHA-256 written after it. A checkpoint is usable only when its manifest matches its state file,
so a folder that a kill left half-copied (Tune persisting it) or half-deleted (Tune dropping it) is
recognised as such, whatever the order in which its files were written or removed; and only when the
state loads with `torch.load(weights_only=True)` (tensors and plain data), so a checkpoint planted in
shared storage cannot run code when a trial loads it.

Why more than Tune's own restore is needed: Tune deletes a superseded checkpoint as soon as it registers
the next one, but the experiment state that names a trial's latest checkpoint reaches storage later (on
the controller's next step, through a background sync). A driver SIGKILLed in between leaves an
experiment state that names a folder that is gone or half-gone, and Tune's restore then fails the trial
on every retry; and an experiment state written before a trial's first checkpoint names none at all. So a
resumed sweep first makes every referenced folder exist again (`ensure_restorable`, in the driver, before
`Tuner.restore`), and a trial restores from the newest usable checkpoint in its own folder, whichever one
Tune names, else from scratch, saying so (`restore_point`). It never fails for want of a checkpoint.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import pickle
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import pyarrow.fs
import torch
from ray import tune
from ray.tune import ExperimentAnalysis
from ray.tune.experiment import Trial

from worker.contract.errors import storage_error

STATE_FILE = "trial_state.pt"
MANIFEST_FILE = "trial_state.json"
# 2: the state loads with torch.load(weights_only=True) (RNG states as plain data). A format-1 checkpoint
# held numpy arrays, so it counts as unusable: the trial starts over rather than unpickle arbitrary code.
FORMAT = 2
logger = logging.getLogger(__name__)


class UnusableCheckpoint(Exception):
    """A checkpoint folder that does not hold a complete, matching state (the reason says why)."""


@contextmanager
def writing(what: str) -> Iterator[None]:
    """Turns an error that a full, read-only or refusing file system gives while writing `what` (an
    OSError, or a native writer's error naming the OS error, as safetensors' does) into a `StorageError`
    (class `storage`) with a one-line reason; any other error passes unchanged."""
    try:
        yield
    except Exception as err:
        converted = storage_error(err, what)
        if converted is None:
            raise
        raise converted from err


class _Recorded:
    """A file that remembers the first OSError of a write: torch's writer turns it into "unexpected pos"
    (a RuntimeError without the errno), so `write_state` raises the OSError itself instead."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file, self.error = file, cast(OSError | None, None)

    def write(self, data: bytes) -> int:
        try:
            return self.file.write(data)
        except OSError as err:
            self.error = self.error or err
            raise

    def flush(self) -> None:
        self.file.flush()


def write_state(folder: Path, state: dict[str, Any]) -> None:
    """Writes `state` ({"session": ..., "history": [epoch records]}) and then its manifest into `folder`.
    A write that the file system refuses raises its OSError (errno included: ENOSPC, EFBIG, EROFS, ...)."""
    path = folder / STATE_FILE
    with path.open("wb") as file:
        recorded = _Recorded(file)
        try:
            torch.save(state, cast(IO[bytes], recorded))  # torch.save needs only write() and flush()
        except Exception as err:
            if recorded.error is not None:
                raise recorded.error from err
            raise
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    manifest = {"format": FORMAT, "epochs_done": len(state["history"]), "size": path.stat().st_size,
                "sha256": digest.hexdigest()}  # fmt: skip
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest))


def _read(checkpoint: tune.Checkpoint, name: str) -> bytes:
    filesystem = checkpoint.filesystem
    assert filesystem is not None  # Checkpoint() resolves it from the path
    try:
        with filesystem.open_input_stream(posixpath.join(checkpoint.path, name)) as stream:
            return bytes(stream.readall())
    except (FileNotFoundError, OSError) as err:
        raise UnusableCheckpoint(f"{name} is missing") from err


def read_manifest(checkpoint: tune.Checkpoint) -> dict[str, Any]:
    try:
        manifest = json.loads(_read(checkpoint, MANIFEST_FILE))
    except ValueError as err:
        raise UnusableCheckpoint(f"{MANIFEST_FILE} is not valid JSON") from err
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UnusableCheckpoint(f"{MANIFEST_FILE} has an unknown format")
    return manifest


def load_state(checkpoint: tune.Checkpoint) -> dict[str, Any]:
    """The checkpoint's state, verified against its manifest; raises UnusableCheckpoint otherwise."""
    manifest = read_manifest(checkpoint)
    data = _read(checkpoint, STATE_FILE)
    if len(data) != manifest["size"] or hashlib.sha256(data).hexdigest() != manifest["sha256"]:
        raise UnusableCheckpoint(f"{STATE_FILE} does not match its manifest (a torn copy)")
    # Weights-only: tensors and plain data, no code. The storage may be shared with other jobs and the
    # manifest proves only that the file is whole, not who wrote it; a file that needs more is refused.
    try:
        state: dict[str, Any] = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise UnusableCheckpoint(f"{STATE_FILE} holds more than tensors and plain data") from err
    except (RuntimeError, ValueError, EOFError) as err:  # not a torch file at all, though its digest matches
        raise UnusableCheckpoint(f"{STATE_FILE} is not a readable torch file") from err
    if not isinstance(state, dict) or not {"session", "history"} <= state.keys():
        raise UnusableCheckpoint(f"{STATE_FILE} does not hold a trial state")
    return state


def trial_checkpoints(filesystem: pyarrow.fs.FileSystem, trial_dir: str) -> list[tune.Checkpoint]:
    """Every `checkpoint_*` folder of a trial, newest name first."""
    selector = pyarrow.fs.FileSelector(trial_dir, allow_not_found=True)
    names = sorted(
        (
            info.base_name
            for info in filesystem.get_file_info(selector)
            if info.type == pyarrow.fs.FileType.Directory and info.base_name.startswith("checkpoint_")
        ),
        reverse=True,
    )
    return [tune.Checkpoint(posixpath.join(trial_dir, name), filesystem) for name in names]


def trial_folder(experiment_path: str, trial_dir_name: str) -> tuple[pyarrow.fs.FileSystem, str]:
    """(filesystem, path) of a trial's folder under the sweep's storage (a local folder or a URI)."""
    filesystem, path = pyarrow.fs.FileSystem.from_uri(experiment_path)
    return filesystem, posixpath.join(path, trial_dir_name)


@dataclass(frozen=True)
class RestorePoint:
    """Where a (re)started trial continues from. `state` None = from scratch. `substituted` = not the
    checkpoint Tune handed over, so Tune's view of the trial lags and must hear the last epoch again."""

    state: dict[str, Any] | None
    substituted: bool = False
    note: str = ""

    @property
    def epochs_done(self) -> int:
        return len(self.state["history"]) if self.state is not None else 0


def _usable(candidates: list[tune.Checkpoint]) -> list[tuple[int, tune.Checkpoint, str]]:
    """(epochs done, checkpoint, "") for each candidate whose manifest reads, else (-1, checkpoint, why)."""
    out = []
    for candidate in candidates:
        try:
            out.append((int(read_manifest(candidate)["epochs_done"]), candidate, ""))
        except UnusableCheckpoint as err:
            out.append((-1, candidate, str(err)))
    return out


def restore_point(
    named: tune.Checkpoint | None, trial: tuple[pyarrow.fs.FileSystem, str] | None = None
) -> RestorePoint:
    """The state a (re)started trial continues from: its newest usable checkpoint.

    `named` is the checkpoint Tune hands the trial (None on a first start, or when the experiment state
    that reached storage predates the trial's first checkpoint); `trial` is the trial's folder, searched
    for every checkpoint it holds. The newest usable one wins (the named one on a tie): the experiment
    state may lag behind the checkpoints on storage, and every checkpoint is a complete state.
    """
    candidates = {c.path: c for c in ([named] if named is not None else [])}
    if trial is not None:
        candidates |= {c.path: c for c in trial_checkpoints(*trial)}
    elif named is not None:
        folder = posixpath.dirname(named.path.rstrip("/"))
        candidates |= {c.path: c for c in trial_checkpoints(named.filesystem, folder)}
    ranked = sorted(_usable(list(candidates.values())),
                    key=lambda r: (r[0], named is not None and r[1].path == named.path, r[1].path), reverse=True)  # fmt: skip
    problems = [f"{posixpath.basename(c.path)} is unusable ({why})" for _, c, why in ranked if why]
    for epochs, candidate, _ in ranked:
        if epochs < 0:
            break
        try:
            state = load_state(candidate)
        except UnusableCheckpoint as err:
            problems.append(f"{posixpath.basename(candidate.path)} is unusable ({err})")
            continue
        if named is not None and candidate.path == named.path:
            if problems:  # newer folders that were skipped (torn, planted): on record, not silently
                logger.warning("; ".join(problems))
            return RestorePoint(state, note="; ".join(problems))
        source = posixpath.basename(candidate.path)
        named_text = posixpath.basename(named.path) if named is not None else "none"
        note = f"resumed from {source} ({len(state['history'])} epochs done); the experiment state named {named_text}"
        note += "; " + "; ".join(problems) if problems else ""
        logger.warning(note)
        return RestorePoint(state, substituted=True, note=note)
    if named is None and not problems:
        return RestorePoint(None)  # a first start
    note = "; ".join(problems) + "; no usable checkpoint: restarted from scratch"
    logger.warning(note)
    return RestorePoint(None, substituted=named is not None, note=note)


def ensure_restorable(experiment_path: str) -> list[str]:
    """Before `Tuner.restore`: every checkpoint folder that the experiment state names for an unfinished
    trial exists again.

    Tune refuses to restore a trial whose checkpoint folder is gone, and fails a trial when it cannot
    delete a kept folder that is already gone. An empty folder in place of each lets the trial start and
    pick its newest usable checkpoint itself (`restore_point`). Returns what it did.
    """
    try:
        trials = ExperimentAnalysis(experiment_path).trials
    except Exception as err:  # an unreadable experiment state: Tuner.restore reports it better
        return [f"could not read the experiment state to check its checkpoints: {err}"]
    notes = []
    for trial in trials:
        if trial.status == Trial.TERMINATED:
            continue
        manager = trial.run_metadata.checkpoint_manager
        if manager is None:  # not set up yet: no checkpoint named
            continue
        results = [*manager.best_checkpoint_results, manager.latest_checkpoint_result]
        named = [
            result.checkpoint for result in results if result is not None and result.checkpoint is not None
        ]
        for checkpoint in {c.path: c for c in named}.values():
            filesystem = checkpoint.filesystem
            assert filesystem is not None  # Checkpoint() resolves it from the path
            if filesystem.get_file_info(checkpoint.path).type != pyarrow.fs.FileType.Directory:
                filesystem.create_dir(checkpoint.path)
                notes.append(f"trial {trial.trial_id}: {posixpath.basename(checkpoint.path)} was gone")
    return notes
