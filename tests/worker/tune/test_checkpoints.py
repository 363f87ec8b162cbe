"""Trial checkpoints (worker.tune.checkpoints): a torn or vanished checkpoint never fails a trial.

Unit tests on folders built here, then the whole path on the real Ray cluster: a real Tune experiment
whose storage loses the checkpoint folders that its experiment state names (what a driver killed right
after Tune dropped a superseded checkpoint leaves behind) is restored and every trial completes.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow.fs
import pytest
from ray import cloudpickle, tune

from worker.tune.checkpoints import (
    MANIFEST_FILE,
    STATE_FILE,
    UnusableCheckpoint,
    ensure_restorable,
    load_state,
    restore_point,
    write_state,
)
from worker.tune.tuning import KEPT_CHECKPOINTS


def _state(epochs: int) -> dict[str, Any]:
    return {"session": {"weights": list(range(epochs))}, "history": [{"epoch": e + 1} for e in range(epochs)]}


def _checkpoint(trial: Path, index: int, epochs: int) -> tune.Checkpoint:
    folder = trial / f"checkpoint_{index:06d}"
    folder.mkdir(parents=True)
    write_state(folder, _state(epochs))
    return tune.Checkpoint.from_directory(str(folder))


def test_a_written_state_loads_back_verified(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path, 0, epochs=2)
    assert load_state(checkpoint) == _state(2)
    manifest = json.loads((tmp_path / "checkpoint_000000" / MANIFEST_FILE).read_text())
    assert (
        manifest["epochs_done"] == 2
        and manifest["size"] == (tmp_path / "checkpoint_000000" / STATE_FILE).stat().st_size
    )


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda f: (f / STATE_FILE).write_bytes((f / STATE_FILE).read_bytes()[:-100]), "torn copy"),
        (lambda f: (f / STATE_FILE).unlink(), f"{STATE_FILE} is missing"),
        (lambda f: (f / MANIFEST_FILE).unlink(), f"{MANIFEST_FILE} is missing"),
        (lambda f: (f / MANIFEST_FILE).write_text('{"format": 1, "si'), "not valid JSON"),
        (lambda f: shutil.rmtree(f), "missing"),
    ],
    ids=["truncated", "state-missing", "manifest-missing", "manifest-torn", "folder-gone"],
)
def test_a_damaged_checkpoint_is_refused_with_its_reason(tmp_path: Path, damage: Any, reason: str) -> None:
    checkpoint = _checkpoint(tmp_path, 0, epochs=1)
    damage(Path(checkpoint.path))
    with pytest.raises(UnusableCheckpoint, match=reason):
        load_state(checkpoint)


class _RunsCodeOnLoad:
    """What a planted checkpoint could hold: unpickling it would call `touch` on a file of our choosing."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return Path.touch, (str(self.marker),)  # type: ignore[return-value]


def test_a_planted_checkpoint_cannot_run_code_on_load(tmp_path: Path) -> None:
    """Storage shared with other jobs may hold a state file whose manifest matches (its writer wrote both):
    the weights-only load refuses it as unusable, and what it would have run never runs."""
    marker = tmp_path / "code-ran"
    folder = tmp_path / "trial" / "checkpoint_000000"
    folder.mkdir(parents=True)
    write_state(folder, {"session": {"rng": _RunsCodeOnLoad(marker)}, "history": [{"epoch": 1}]})
    with pytest.raises(UnusableCheckpoint, match="holds more than tensors and plain data"):
        load_state(tune.Checkpoint.from_directory(str(folder)))
    assert not marker.exists()
    point = restore_point(None, (pyarrow.fs.LocalFileSystem(), str(tmp_path / "trial")))
    assert point.state is None and "restarted from scratch" in point.note and not marker.exists()


def test_a_checkpoint_of_the_previous_format_counts_as_unusable(tmp_path: Path) -> None:
    checkpoint = _checkpoint(tmp_path, 0, epochs=1)
    manifest = Path(checkpoint.path) / MANIFEST_FILE
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "format": 1}))  # RNG as numpy arrays
    with pytest.raises(UnusableCheckpoint, match="unknown format"):
        load_state(checkpoint)


def test_restore_uses_the_named_checkpoint_when_it_is_the_newest(tmp_path: Path) -> None:
    _checkpoint(tmp_path, 0, epochs=1)
    point = restore_point(_checkpoint(tmp_path, 1, epochs=2))
    assert point.state == _state(2) and not point.substituted and point.note == ""
    assert restore_point(None).state is None and not restore_point(None).substituted


def test_restore_from_the_named_checkpoint_notes_the_newer_ones_it_skipped(tmp_path: Path) -> None:
    torn = _checkpoint(tmp_path, 2, epochs=3)
    (Path(torn.path) / STATE_FILE).write_bytes(b"torn")
    point = restore_point(_checkpoint(tmp_path, 1, epochs=2))
    assert point.state == _state(2) and not point.substituted
    assert (
        point.note
        == "checkpoint_000002 is unusable (trial_state.pt does not match its manifest (a torn copy))"
    )


def test_restore_takes_a_newer_checkpoint_than_the_lagging_experiment_state(tmp_path: Path) -> None:
    # Tune names checkpoint 1, but checkpoint 2 reached storage before the driver died.
    _checkpoint(tmp_path, 2, epochs=3)
    point = restore_point(_checkpoint(tmp_path, 1, epochs=2))
    assert point.state == _state(3) and point.substituted and point.epochs_done == 3
    assert "resumed from checkpoint_000002" in point.note and "named checkpoint_000001" in point.note
    # The experiment state predates the trial's first checkpoint: Tune names none, the folder has one.
    fresh = restore_point(None, (pyarrow.fs.LocalFileSystem(), str(tmp_path)))
    assert fresh.state == _state(3) and fresh.substituted and "named none" in fresh.note


def test_restore_falls_back_to_the_newest_usable_checkpoint_of_the_trial(tmp_path: Path) -> None:
    _checkpoint(tmp_path, 0, epochs=1)
    _checkpoint(tmp_path, 2, epochs=3)
    torn = _checkpoint(tmp_path, 3, epochs=4)  # a copy the kill interrupted
    (Path(torn.path) / STATE_FILE).write_bytes(b"half")
    named = tmp_path / "checkpoint_000001"
    named.mkdir()  # what ensure_restorable leaves for a vanished folder
    point = restore_point(tune.Checkpoint.from_directory(str(named)))
    assert point.state == _state(3) and point.substituted and point.epochs_done == 3
    assert "resumed from checkpoint_000002" in point.note
    assert "checkpoint_000001 is unusable" in point.note and "checkpoint_000003 is unusable" in point.note


def test_restore_starts_over_when_no_checkpoint_is_usable(tmp_path: Path) -> None:
    torn = _checkpoint(tmp_path, 0, epochs=1)
    (Path(torn.path) / MANIFEST_FILE).unlink()
    point = restore_point(torn)
    assert point.state is None and point.substituted and "restarted from scratch" in point.note
    # A first start whose only folder is a torn first copy: from scratch, and Tune's view agrees.
    first = restore_point(None, (pyarrow.fs.LocalFileSystem(), str(tmp_path)))
    assert first.state is None and not first.substituted and "restarted from scratch" in first.note


# The real path: a Tune experiment on the shared Ray cluster, its storage damaged between two attempts.

EPOCHS = 3


def _trainable(config: dict[str, Any]) -> None:
    point = restore_point(tune.get_checkpoint())
    history = list(point.state["history"]) if point.state else []

    def report() -> None:
        with tempfile.TemporaryDirectory() as folder:
            write_state(Path(folder), {"session": {}, "history": history})
            tune.report(
                {"epoch": len(history), "note": point.note}, checkpoint=tune.Checkpoint.from_directory(folder)
            )

    if point.substituted and history:
        report()
    while len(history) < EPOCHS:
        if len(history) == 2 and not (Path(config["scratch"]) / "second-attempt").exists():
            raise RuntimeError("the first attempt stops here, as a killed driver would leave it")
        history.append({"epoch": len(history) + 1})
        report()


def _fit(path: Path, scratch: Path, restore: bool) -> tune.ResultGrid:
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # a test module is not importable on workers
    trainable = tune.with_resources(_trainable, {"cpu": 0.5})
    if restore:
        tuner = tune.Tuner.restore(str(path), trainable=trainable, resume_errored=True)
    else:
        tuner = tune.Tuner(
            trainable,
            param_space={"scratch": str(scratch), "case": tune.grid_search(["fallback", "scratch"])},
            run_config=tune.RunConfig(
                name=path.name, storage_path=str(path.parent), verbose=0,
                checkpoint_config=tune.CheckpointConfig(num_to_keep=KEPT_CHECKPOINTS),
            ),
        )  # fmt: skip
    return tuner.fit()


def test_a_sweep_whose_named_checkpoints_vanished_resumes_every_trial(
    ray_cluster: Any, tmp_path: Path
) -> None:
    path, scratch = tmp_path / "storage" / "vanished", tmp_path / "scratch"
    first = _fit(path, scratch, restore=False)
    assert first.num_errors == 2
    trials = {r.config["case"]: Path(r.path) for r in first}
    assert all(sorted(p.name for p in t.glob("checkpoint_*")) == ["checkpoint_000000", "checkpoint_000001"]
               for t in trials.values())  # fmt: skip
    # "fallback": the named latest checkpoint is gone, the older kept one is intact.
    shutil.rmtree(trials["fallback"] / "checkpoint_000001")
    # "scratch": the older kept folder is gone and the latest is torn: nothing usable is left.
    shutil.rmtree(trials["scratch"] / "checkpoint_000000")
    (trials["scratch"] / "checkpoint_000001" / STATE_FILE).write_bytes(b"torn")

    notes = ensure_restorable(str(path))
    assert len(notes) == 2 and all((trials[case] / name).is_dir()
                                   for case, name in [("fallback", "checkpoint_000001"), ("scratch", "checkpoint_000000")])  # fmt: skip
    scratch.mkdir(exist_ok=True)
    (scratch / "second-attempt").touch()
    second = _fit(path, scratch, restore=True)
    assert second.num_errors == 0 and second.num_terminated == 2
    results = {r.config["case"]: r.metrics for r in second}
    assert (
        results["fallback"]["epoch"] == EPOCHS
        and "resumed from checkpoint_000000" in results["fallback"]["note"]
    )
    assert results["scratch"]["epoch"] == EPOCHS and "restarted from scratch" in results["scratch"]["note"]
