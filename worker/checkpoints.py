"""Trial checkpoints that a killed driver or trial cannot turn into a lost trial.

A trial's checkpoint is a folder in the sweep's Tune storage holding `trial_state.pt` (the whole
`TrainingSession` state and the epoch history) and `trial_state.json`, a manifest with the state file's
size and SHA-256 written after it. A checkpoint is usable only when its manifest matches its state file,
so a folder that a kill left half-copied (Tune persisting it) or half-deleted (Tune dropping it) is
recognised as such, whatever the order in which its files were written or removed.

Why more than Tune's own restore is needed: Tune deletes a superseded checkpoint as soon as it registers
the next one, but the experiment state that names a trial's latest checkpoint reaches storage later (on
the controller's next step, through a background sync). A driver SIGKILLed in between leaves an
experiment state that names a folder that is gone or half-gone, and Tune's restore then fails the trial
on every retry. So a resumed sweep first makes every referenced folder exist again (`ensure_restorable`,
in the driver, before `Tuner.restore`), and a trial restores from the checkpoint Tune hands it when that
one is usable, else from the newest usable checkpoint of the same trial, else from scratch, saying which
(`restore_point`). It never fails for want of a checkpoint.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.fs
import torch
from ray import tune

STATE_FILE = "trial_state.pt"
MANIFEST_FILE = "trial_state.json"
FORMAT = 1
logger = logging.getLogger(__name__)


class UnusableCheckpoint(Exception):
    """A checkpoint folder that does not hold a complete, matching state (the reason says why)."""


def write_state(folder: Path, state: dict[str, Any]) -> None:
    """Writes `state` ({"session": ..., "history": [epoch records]}) and then its manifest into `folder`."""
    path = folder / STATE_FILE
    torch.save(state, path)
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    manifest = {"format": FORMAT, "epochs_done": len(state["history"]), "size": path.stat().st_size,
                "sha256": digest.hexdigest()}  # fmt: skip
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest))


def _read(checkpoint: tune.Checkpoint, name: str) -> bytes:
    try:
        with checkpoint.filesystem.open_input_stream(posixpath.join(checkpoint.path, name)) as stream:
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
    # Our own file in the sweep's storage, verified above; it holds RNG states, so not weights-only.
    state: dict[str, Any] = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
    return state


def sibling_checkpoints(checkpoint: tune.Checkpoint) -> list[tune.Checkpoint]:
    """The other `checkpoint_*` folders of the same trial, newest name first."""
    trial_dir, own = posixpath.split(checkpoint.path.rstrip("/"))
    selector = pyarrow.fs.FileSelector(trial_dir, allow_not_found=True)
    names = sorted(
        (
            info.base_name
            for info in checkpoint.filesystem.get_file_info(selector)
            if info.type == pyarrow.fs.FileType.Directory and info.base_name.startswith("checkpoint_")
        ),
        reverse=True,
    )
    return [
        tune.Checkpoint(posixpath.join(trial_dir, name), checkpoint.filesystem)
        for name in names
        if name != own
    ]


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


def _newest_usable(candidates: list[tune.Checkpoint]) -> tuple[tune.Checkpoint, dict[str, Any]] | None:
    ranked = []
    for candidate in candidates:
        try:
            ranked.append((int(read_manifest(candidate)["epochs_done"]), candidate))
        except UnusableCheckpoint:
            continue
    for _, candidate in sorted(ranked, key=lambda pair: pair[0], reverse=True):  # most epochs first
        try:
            return candidate, load_state(candidate)
        except UnusableCheckpoint:
            continue
    return None


def restore_point(checkpoint: tune.Checkpoint | None) -> RestorePoint:
    """The state to continue from, given the checkpoint Tune hands the trial (None: a first start)."""
    if checkpoint is None:
        return RestorePoint(None)
    try:
        return RestorePoint(load_state(checkpoint))
    except UnusableCheckpoint as err:
        reason = f"{posixpath.basename(checkpoint.path)} is unusable ({err})"
    found = _newest_usable(sibling_checkpoints(checkpoint))
    if found is None:
        note = f"{reason}; no other usable checkpoint: restarted from scratch"
        logger.warning(note)
        return RestorePoint(None, substituted=True, note=note)
    source, state = found
    note = f"{reason}; resumed from {posixpath.basename(source.path)} ({len(state['history'])} epochs done)"
    logger.warning(note)
    return RestorePoint(state, substituted=True, note=note)


def ensure_restorable(experiment_path: str) -> list[str]:
    """Before `Tuner.restore`: every checkpoint folder that the experiment state names for an unfinished
    trial exists again.

    Tune refuses to restore a trial whose checkpoint folder is gone, and fails a trial when it cannot
    delete a kept folder that is already gone. An empty folder in place of each lets the trial start and
    pick its newest usable checkpoint itself (`restore_point`). Returns what it did.
    """
    from ray.tune import ExperimentAnalysis
    from ray.tune.experiment import Trial

    try:
        trials = ExperimentAnalysis(experiment_path).trials
    except Exception as err:  # an unreadable experiment state: Tuner.restore reports it better
        return [f"could not read the experiment state to check its checkpoints: {err}"]
    notes = []
    for trial in trials:
        if trial.status == Trial.TERMINATED:
            continue
        manager = trial.run_metadata.checkpoint_manager
        named = [result.checkpoint for result in manager.best_checkpoint_results]
        if manager.latest_checkpoint_result is not None:
            named.append(manager.latest_checkpoint_result.checkpoint)
        for checkpoint in {c.path: c for c in named}.values():
            if checkpoint.filesystem.get_file_info(checkpoint.path).type != pyarrow.fs.FileType.Directory:
                checkpoint.filesystem.create_dir(checkpoint.path)
                notes.append(f"trial {trial.trial_id}: {posixpath.basename(checkpoint.path)} was gone")
    return notes
