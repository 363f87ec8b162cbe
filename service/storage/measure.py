"""The engine's measurement of each team's disk (service.storage.keeper calls it every
SMARTUNE_STORAGE_REFRESH_S): its Tune storage walked or listed whole, and its share of MLflow's local
artifact folder, written to `storage_usage` for the quota checks to read.

MLflow keeps a run's artifacts in `<artifact root>/<run id>/` and a model logged from it (MLflow 3) in
`<artifact root>/models/<model id>/`, whose `MLmodel` file names the run (`run_id:`). A run belongs to the
team of the job that recorded it (a job's parent run, its trials' runs); a folder of a run the job store
does not know is nobody's. MLflow behind a tracking server keeps its artifacts itself (S3 in the team
stack): they are not measured (`Settings.artifact_root` is None there).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping, Sequence
from datetime import datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.config import Settings
from service.storage.trees import LocalTree, open_tree, total
from service.store.models import Job, StorageUsage, Team, Trial

MODELS = "models"  # MLflow 3's folder of logged models under the artifact root
RUN_ID = re.compile(r"^run_id:\s*['\"]?([0-9a-f]{32})['\"]?\s*$", re.MULTILINE)


def run_owners(session: Session) -> dict[str, int]:
    """MLflow run id -> team id, for every run the job store knows: jobs' parent runs and trials' runs."""
    owners: dict[str, int] = {}
    parents = select(Job.mlflow_parent_run_id, Job.team_id).where(Job.mlflow_parent_run_id.is_not(None))
    trials = (
        select(Trial.mlflow_run_id, Job.team_id)
        .join(Job, Job.id == Trial.job_id)
        .where(Trial.mlflow_run_id.is_not(None))
    )
    for query in (parents, trials):
        for run_id, team_id in session.execute(query):
            owners[str(run_id)] = int(team_id)
    return owners


def model_run(folder: Path) -> str | None:
    """The run a logged model's folder came from, as its MLmodel file says; None when unreadable."""
    try:
        text = (folder / "artifacts" / "MLmodel").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = RUN_ID.search(text)
    return found.group(1) if found else None


def artifact_bytes(
    root: Path, owners: Mapping[str, int], model_runs: MutableMapping[str, str | None]
) -> dict[int, int]:
    """Per team: bytes under the local artifact root that belong to its runs (see the module's text).
    `model_runs` caches model folder -> run id across measurements (a logged model never changes runs)."""
    folders: dict[str, int] = {}  # "<run id>" or "models/<model id>" -> bytes
    for path, size in LocalTree(root).files():
        head, _, rest = path.partition("/")
        folder = f"{MODELS}/{rest.partition('/')[0]}" if head == MODELS else head
        folders[folder] = folders.get(folder, 0) + size
    out: dict[int, int] = {}
    for folder, size in folders.items():
        run: str | None = folder
        if folder.startswith(f"{MODELS}/"):
            if folder not in model_runs:
                model_runs[folder] = model_run(root / folder)
            run = model_runs[folder]
        team = owners.get(run) if run else None
        if team is not None:
            out[team] = out.get(team, 0) + size
    return out


def measure(
    settings: Settings,
    teams: Sequence[tuple[int, str]],
    owners: Mapping[str, int],
    model_runs: MutableMapping[str, str | None],
) -> dict[int, tuple[int, int]]:
    """Per team id: (bytes of its Tune storage, bytes of its local MLflow artifacts). Reads files only."""
    artifacts: dict[int, int] = {}
    if settings.artifact_root is not None:
        artifacts = artifact_bytes(Path(settings.artifact_root), owners, model_runs)
    return {
        team_id: (total(open_tree(settings.team_storage(name))), artifacts.get(team_id, 0))
        for team_id, name in teams
    }


def teams_of(session: Session) -> list[tuple[int, str]]:
    return [(int(i), str(n)) for i, n in session.execute(select(Team.id, Team.name))]


def save(session: Session, measured: Mapping[int, tuple[int, int]], at: datetime) -> None:
    """Write each team's measurement (the caller commits); a team deleted meanwhile is skipped."""
    known = set(session.scalars(select(Team.id).where(Team.id.in_(list(measured)))))
    for team_id, (checkpoints, artifacts) in measured.items():
        if team_id not in known:
            continue
        row = session.get(StorageUsage, team_id) or StorageUsage(team_id=team_id)
        row.checkpoint_bytes, row.artifact_bytes, row.measured_at = checkpoints, artifacts, at
        session.add(row)
