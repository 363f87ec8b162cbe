"""A checkpoint planted in a sweep's storage is refused by the trial that finds it, and what it would run
never runs: the real resume path, in a Ray trial process, on a real sweep.

Attempt 1 of the job fails its trial for real after its first checkpoint (the folder of the second is
immutable: class `storage`). Then the storage is fixed, and someone with write access to it plants a
newer-looking checkpoint whose state file and manifest agree but whose pickle calls a function on load.
Attempt 2 resumes the trial: the weights-only load refuses the planted state, the trial continues from its
own checkpoint, says so on its MLflow run, and finishes; the planted code never ran.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from tests.worker.tune.faults import TrialWatcher, can_make_immutable, immutable, unlocked
from worker.contract.spec import JobSpec
from worker.tune.checkpoints import write_state
from worker.tune.settings import Settings
from worker.tune.sweep import run_sweep
from worker.tune.tracking import TrackingTarget, find_runs
from worker.tune.tuning import trial_dir_name

pytestmark = [pytest.mark.glue, pytest.mark.slow]


class RunsCodeOnLoad:
    """Unpickling this calls `Path.touch` on the marker: what a planted checkpoint could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return Path.touch, (str(self.marker),)


def test_a_checkpoint_planted_in_storage_is_refused_not_executed(
    ray_cluster: Any, tiny_spec: Any, tmp_path: Path
) -> None:
    if not can_make_immutable(tmp_path):
        pytest.skip("chattr +i does not work here (needs root or CAP_LINUX_IMMUTABLE, and ext4/xfs/btrfs)")
    settings = Settings.from_env({"SMARTUNE_DATA_DIR": str(tmp_path / "data")})
    settings.prepare()
    spec = JobSpec.model_validate(tiny_spec(method="vanilla", method_params={}, training={"epochs": 3},
                                            limits={"max_concurrent_trials": 1, "max_retries": 0}))  # fmt: skip
    experiment = Path(settings.experiment_path("planted-1"))
    locked: list[Path] = []

    def lock_second_checkpoint(run: Any, _pid: int) -> dict[str, Any]:
        folder = experiment / trial_dir_name(run.data.tags["smartune.trial_id"]) / "checkpoint_000001"
        folder.mkdir(parents=True)
        immutable(folder)
        locked.append(folder)
        return {"trial_dir": folder.parent}

    watcher = TrialWatcher(settings, "planted-1", {}, lock_second_checkpoint)
    watcher.start()
    with unlocked(locked):
        first = run_sweep(spec, job_id="planted-1", attempt=1, settings=settings)
        watcher.join(timeout=5)
    assert watcher.error is None and watcher.done, watcher.error
    assert first["trials_by_state"]["ERROR"] == 1 and first["errors"][0]["error_class"] == "storage"

    trial_dir: Path = watcher.done["trial_dir"]
    marker = tmp_path / "planted-code-ran"
    planted = trial_dir / "checkpoint_000009"  # newer than any real one, and claims more epochs
    planted.mkdir()
    write_state(
        planted, {"session": {"rng": RunsCodeOnLoad(marker)}, "history": [{"epoch": e} for e in range(1, 3)]}
    )
    second = run_sweep(spec, job_id="planted-1", attempt=2, settings=settings)

    assert not marker.exists()  # the planted pickle never ran, in the trial process or here
    assert second["trials_by_state"]["TERMINATED"] == 1 and second["errors"] == []
    client = MlflowClient(settings.tracking_uri)
    experiment_id = client.get_experiment_by_name(settings.experiment).experiment_id  # type: ignore[union-attr]
    (run,) = [r for r in find_runs(client, TrackingTarget(settings.tracking_uri, experiment_id, "planted-1"))
              if "smartune.trial_id" in r.data.tags]  # fmt: skip
    tags = run.data.tags
    assert run.info.status == "FINISHED" and tags["smartune.state"] == "TERMINATED"
    assert tags["smartune.resumed_from_epoch"] == "1" and tags["smartune.starts"] == "2"
    assert (
        "checkpoint_000009 is unusable (trial_state.pt holds more than tensors and plain data)"
        in tags["smartune.restore_note"]
    )
    print(f"restore note: {tags['smartune.restore_note']}")
