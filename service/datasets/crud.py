"""Dataset rows on a session: keyword-only functions, no FastAPI. Callers commit.

Who sees what: a team sees its own datasets and the versions an admin published; an admin sees all (and
names the team with `team` where two teams use one name). A dataset another team keeps to itself is not
found (404), never forbidden: its existence is not the caller's to learn.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, func, or_, select
from sqlalchemy.orm import Session

from service.datasets.schemas import DatasetFile, DatasetPublic
from service.errors import ApiError, not_found
from service.store.models import FINAL_STATES, Dataset, Job, Team
from worker.contract.sources import DatasetRef


def public(row: Dataset) -> DatasetPublic:
    return DatasetPublic(
        name=row.name,
        version=row.version,
        team=row.team.name,
        task=row.task,
        description=row.description,
        digest=row.digest,
        ref=str(DatasetRef(digest=row.digest)),
        size_bytes=row.size_bytes,
        files=[DatasetFile.model_validate(f) for f in row.files],
        rows=row.rows,
        published=row.published,
        created_at=row.created_at,
    )


def _visible(scope: int | None) -> list[ColumnElement[bool]]:
    return [] if scope is None else [or_(Dataset.team_id == scope, Dataset.published)]


def team_versions(*, session: Session, team_id: int, name: str) -> Sequence[Dataset]:
    query = select(Dataset).where(Dataset.team_id == team_id, Dataset.name == name).order_by(Dataset.version)
    return session.scalars(query).all()


def add_version(
    *,
    session: Session,
    team: Team,
    name: str,
    task: str,
    description: str | None,
    digest: str,
    files: list[dict[str, object]],
    rows: dict[str, int],
    key_id: str,
) -> tuple[Dataset, bool]:
    """Record an upload: the latest version when it has the same content and task (nothing new), else
    version n+1. Returns the row and whether it is new."""
    versions = team_versions(session=session, team_id=team.id, name=name)
    if versions and versions[-1].digest == digest and versions[-1].task == task:
        return versions[-1], False
    row = Dataset(
        team_id=team.id,
        name=name,
        version=versions[-1].version + 1 if versions else 1,
        digest=digest,
        task=task,
        description=description,
        files=files,
        rows=rows,
        size_bytes=sum(int(f["bytes"]) for f in files),  # type: ignore[call-overload]
        published=False,
        created_by=key_id,
    )
    row.team = team
    session.add(row)
    session.flush()
    return row, True


def list_datasets(*, session: Session, scope: int | None) -> list[tuple[Dataset, int]]:
    """The latest visible version of each (team, name), with its number of visible versions; by name."""
    rows = session.scalars(
        select(Dataset).where(*_visible(scope)).order_by(Dataset.name, Dataset.team_id, Dataset.version)
    ).all()
    latest: dict[tuple[int, str], tuple[Dataset, int]] = {}
    for row in rows:
        count = latest.get((row.team_id, row.name), (row, 0))[1]
        latest[(row.team_id, row.name)] = (row, count + 1)
    return list(latest.values())


def versions(*, session: Session, scope: int | None, name: str, team: str | None = None) -> list[Dataset]:
    """The visible versions of `name`, oldest first: the caller's own team's when it has one by that name,
    else another team's published ones; 404 when none, 409 when several teams' would match (name `team`)."""
    query = select(Dataset).where(Dataset.name == name, *_visible(scope))
    if team is not None:
        query = query.join(Team, Team.id == Dataset.team_id).where(Team.name == team)
    rows = list(session.scalars(query.order_by(Dataset.team_id, Dataset.version)).all())
    owners = {row.team_id for row in rows}
    if scope in owners:
        rows = [row for row in rows if row.team_id == scope]
    elif len(owners) > 1:
        teams = ", ".join(sorted({row.team.name for row in rows}))
        raise ApiError(409, f"several teams have a dataset {name!r} ({teams}); name one with ?team=",
                       field="query.team")  # fmt: skip
    if not rows:
        raise not_found("dataset", name)
    return rows


def version(
    *, session: Session, scope: int | None, name: str, number: int, team: str | None = None
) -> Dataset:
    for row in versions(session=session, scope=scope, name=name, team=team):
        if row.version == number:
            return row
    raise not_found("dataset", f"{name}@{number}")


def by_digest(*, session: Session, scope: int | None, digest: str) -> Dataset | None:
    """A visible dataset with this content (the caller's own first), or None."""
    query = select(Dataset).where(Dataset.digest == digest, *_visible(scope))
    rows = session.scalars(query.order_by(Dataset.id)).all()
    own = [row for row in rows if row.team_id == scope]
    return own[0] if own else (rows[0] if rows else None)


def digest_users(*, session: Session, digest: str) -> int:
    """Dataset rows (any team's) with this content: its objects stay in the store while one is left."""
    return session.scalar(select(func.count()).select_from(Dataset).where(Dataset.digest == digest)) or 0


def unfinished_jobs(*, session: Session, digest: str) -> list[str]:
    """Ids of jobs not yet finished (any team's) whose pinned spec reads this dataset (at most 10)."""
    pinned = f'"data":"{DatasetRef(digest=digest)}"'  # the canonical JSON: compact, sorted keys
    query = (
        select(Job.id)
        .where(Job.state.not_in(FINAL_STATES), Job.spec_json.contains(pinned, autoescape=True))
        .order_by(Job.created_at)
        .limit(10)
    )
    return list(session.scalars(query).all())
