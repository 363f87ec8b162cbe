"""A team's storage against its quota: what it holds, and the checks at upload and at submission.

A team holds its uploaded datasets (summed from their rows, each content once: the store keeps one copy
per digest), its Tune checkpoints (its Tune storage, `Settings.team_storage`) and its runs' MLflow
artifacts where MLflow keeps them locally. The last two are walked by the engine every
SMARTUNE_STORAGE_REFRESH_S (service.storage.measure) and read here from `storage_usage`, so a check costs
two small queries, never a walk. The quota in effect is the team's `storage_quota_bytes`, else
SMARTUNE_DEFAULT_STORAGE_QUOTA_GB, else none. An upload that would take the team past it, and a new job
of a team at or past it (a job adds checkpoints of a size nobody knows yet), are refused with 409 and
the numbers (`storage`: used, quota, by kind, and the upload's bytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.config import Settings
from service.errors import ApiError
from service.storage.schemas import StoragePublic
from service.store.models import Dataset, StorageUsage, Team

UNITS = ((10**12, "TB"), (10**9, "GB"), (10**6, "MB"), (10**3, "kB"))


def human(size: float) -> str:
    """Bytes in decimal units, three significant digits: `1.10 GB`, `200 MB`, `512 B`."""
    for factor, unit in UNITS:
        if abs(size) >= factor:
            return f"{size / factor:.3g} {unit}"
    return f"{size:g} B"


def quota_of(team: Team, settings: Settings) -> int | None:
    """Bytes the team may keep: its own quota, else the deployment's default; None = unlimited."""
    if team.storage_quota_bytes is not None:
        return team.storage_quota_bytes
    return settings.default_storage_quota_bytes


def retention_days(team: Team, settings: Settings) -> float:
    """Days a finished job of the team keeps its kept checkpoints (service.storage.retention)."""
    days = team.checkpoint_retention_days
    return days if days is not None else settings.checkpoint_retention_days


@dataclass(frozen=True)
class Usage:
    datasets: int  # bytes, exact
    checkpoints: int  # bytes, as last measured
    artifacts: int  # bytes, as last measured
    quota: int | None  # bytes; None = unlimited
    measured_at: datetime | None  # when checkpoints and artifacts were measured; None = never

    @property
    def used(self) -> int:
        return self.datasets + self.checkpoints + self.artifacts

    def fits(self, adding: int) -> bool:
        return self.quota is None or self.used + adding <= self.quota

    def public(self) -> StoragePublic:
        return StoragePublic(used_bytes=self.used, quota_bytes=self.quota, datasets_bytes=self.datasets,
                             checkpoints_bytes=self.checkpoints, artifacts_bytes=self.artifacts,
                             measured_at=self.measured_at)  # fmt: skip

    def parts(self) -> str:
        return (f"datasets {human(self.datasets)}, checkpoints {human(self.checkpoints)}, MLflow artifacts "
                f"{human(self.artifacts)}")  # fmt: skip


def dataset_bytes(session: Session, team_ids: Sequence[int]) -> dict[int, int]:
    """Per team: bytes of its datasets, each distinct content once (versions may share a digest)."""
    query = (
        select(Dataset.team_id, Dataset.digest, func.max(Dataset.size_bytes))
        .where(Dataset.team_id.in_(team_ids))
        .group_by(Dataset.team_id, Dataset.digest)
    )
    out = dict.fromkeys(team_ids, 0)
    for team_id, _digest, size in session.execute(query):
        out[team_id] += int(size or 0)
    return out


def usages(session: Session, settings: Settings, teams: Sequence[Team]) -> dict[int, Usage]:
    """Each team's usage, by team id: two queries, whatever the number of teams."""
    ids = [t.id for t in teams]
    datasets = dataset_bytes(session, ids)
    measured = {
        row.team_id: row for row in session.scalars(select(StorageUsage).where(StorageUsage.team_id.in_(ids)))
    }
    out = {}
    for team in teams:
        row = measured.get(team.id)
        out[team.id] = Usage(
            datasets=datasets[team.id],
            checkpoints=row.checkpoint_bytes if row else 0,
            artifacts=row.artifact_bytes if row else 0,
            quota=quota_of(team, settings),
            measured_at=row.measured_at if row else None,
        )
    return out


def usage(session: Session, settings: Settings, team: Team) -> Usage:
    return usages(session, settings, [team])[team.id]


def _refusal(detail: str, usage: Usage, adding: int | None) -> ApiError:
    numbers: dict[str, Any] = usage.public().model_dump(mode="json")
    if adding is not None:
        numbers["upload_bytes"] = adding
    return ApiError(409, detail, extra={"storage": numbers})


def check_upload(session: Session, settings: Settings, team: Team, size: int) -> Usage:
    """The team's usage; 409 with the numbers when `size` more bytes would take it past its quota."""
    now = usage(session, settings, team)
    if not now.fits(size):
        assert now.quota is not None
        raise _refusal(
            f"team {team.name!r} would exceed its storage quota of {human(now.quota)}: it holds "
            f"{human(now.used)} ({now.parts()}) and this upload adds {human(size)}; delete datasets or "
            "finished jobs' checkpoints (they expire by themselves), or ask an admin for a larger quota",
            now,
            size,
        )
    return now


def check_job(session: Session, settings: Settings, team: Team) -> Usage:
    """The team's usage; 409 with the numbers when it is at or past its quota (a job adds checkpoints)."""
    now = usage(session, settings, team)
    if now.quota is not None and now.used >= now.quota:
        raise _refusal(
            f"team {team.name!r} has used its storage quota: {human(now.used)} of {human(now.quota)} "
            f"({now.parts()}), and a new job would add checkpoints; delete datasets, let finished jobs' "
            "checkpoints expire, or ask an admin for a larger quota",
            now,
            None,
        )
    return now
