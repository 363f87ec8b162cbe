"""Where a sweep keeps its state, from the environment only: data dir, Tune storage, MLflow store.

| setting            | environment                  | default                                   |
|--------------------|------------------------------|-------------------------------------------|
| data directory     | `SMARTUNE_DATA_DIR`          | `~/.smartune`                             |
| Tune storage path  | `SMARTUNE_STORAGE_PATH`      | `<data dir>/ray_results` (or `s3://...`)  |
| MLflow tracking    | `MLFLOW_TRACKING_URI`        | `sqlite:///<data dir>/mlflow.db`          |
| MLflow artifacts   | `SMARTUNE_MLFLOW_ARTIFACTS`  | `<data dir>/mlartifacts` (new experiments |
|                    |                              | in a local store only; a server decides)  |
| MLflow experiment  | `SMARTUNE_MLFLOW_EXPERIMENT` | `smartune`                                |
| GPU trial placement| `SMARTUNE_TRIAL_PLACEMENT`   | `best-fit` (the fullest node that fits, a |
|                    |                              | hint to Ray); `ray`: Ray's own rule       |
| unplaceable wait   | `SMARTUNE_UNPLACEABLE_       | `900` s with no live node able to hold a  |
|                    | TIMEOUT_S`                   | pending trial, none running; `0`: off     |
|                    |                              | (the default with                         |
|                    |                              | `SMARTUNE_WAIT_FOR_RESOURCES`)            |
| the job's team     | `SMARTUNE_TEAM`              | `local`: names its registered models      |
|                    |                              | `smartune-<team>-<task>`                  |

The Tune storage path lies outside Ray's session directory so that a new Ray head can resume a sweep.
Standard library only: no torch, no ray, no mlflow.
"""

from __future__ import annotations

import math
import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from worker.contract.model_registry import LOCAL_TEAM, TEAM_ENV

PLACEMENTS = ("best-fit", "ray")  # where GPU trials go: hinted best fit, or Ray's own (emptiest node)
UNPLACEABLE_TIMEOUT_S = 900.0  # a worker node restarting takes minutes; one lost for good, forever


def _is_uri(value: str) -> bool:
    return "://" in value


def _unplaceable(environ: Mapping[str, str]) -> float:
    raw = environ.get("SMARTUNE_UNPLACEABLE_TIMEOUT_S", "")
    if not raw:  # an autoscaler may take longer to bring a node than a lost node takes to come back
        return 0.0 if environ.get("SMARTUNE_WAIT_FOR_RESOURCES") else UNPLACEABLE_TIMEOUT_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds < math.inf:  # NaN fails this too
        raise ValueError(f"SMARTUNE_UNPLACEABLE_TIMEOUT_S={raw!r}: expected seconds >= 0 (0 turns it off)")
    return seconds


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    storage_path: str  # a local folder (absolute) or a pyarrow URI such as s3://bucket/prefix
    tracking_uri: str
    artifact_root: str | None  # artifact location of a newly created experiment; None = the store decides
    experiment: str
    placement: str = "best-fit"  # PLACEMENTS; worker.tune.placement
    unplaceable_timeout_s: float = UNPLACEABLE_TIMEOUT_S  # worker.tune.unplaceable_guard; 0 = off
    team: str = LOCAL_TEAM  # whose registered models the sweep adds to (worker.contract.model_registry)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, storage_path: str | None = None) -> Settings:
        data_dir = Path(environ.get("SMARTUNE_DATA_DIR", "") or "~/.smartune").expanduser().resolve()
        storage = storage_path or environ.get("SMARTUNE_STORAGE_PATH", "") or str(data_dir / "ray_results")
        if not _is_uri(storage):
            storage = str(Path(storage).expanduser().resolve())
        tracking = environ.get("MLFLOW_TRACKING_URI", "") or f"sqlite:///{data_dir / 'mlflow.db'}"
        local_store = tracking.startswith(("sqlite:", "file:")) or not _is_uri(tracking)
        artifacts = environ.get("SMARTUNE_MLFLOW_ARTIFACTS", "") or (
            (data_dir / "mlartifacts").as_uri() if local_store else None
        )
        experiment = environ.get("SMARTUNE_MLFLOW_EXPERIMENT", "") or "smartune"
        placement = environ.get("SMARTUNE_TRIAL_PLACEMENT", "") or "best-fit"
        if placement not in PLACEMENTS:
            raise ValueError(
                f"SMARTUNE_TRIAL_PLACEMENT={placement!r}: expected one of {', '.join(PLACEMENTS)}"
            )
        team = environ.get(TEAM_ENV, "") or LOCAL_TEAM
        return cls(
            data_dir, storage, tracking, artifacts, experiment, placement, _unplaceable(environ), team=team
        )

    def prepare(self) -> None:
        """Creates the local folders (the data dir, a local storage path); URIs are left to their store."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not _is_uri(self.storage_path):
            Path(self.storage_path).mkdir(parents=True, exist_ok=True)

    def experiment_path(self, job_id: str) -> str:
        """The Tune experiment folder of a job: `<storage path>/<job id>` (the experiment name is the job id)."""
        if _is_uri(self.storage_path):
            return posixpath.join(self.storage_path, job_id)
        return str(Path(self.storage_path) / job_id)

    def has_experiment(self, job_id: str) -> bool:
        """Whether the storage holds a Tune experiment of this job (a local folder or under a URI)."""
        import pyarrow.fs

        filesystem, path = pyarrow.fs.FileSystem.from_uri(self.experiment_path(job_id))
        return bool(filesystem.get_file_info(path).type == pyarrow.fs.FileType.Directory)
