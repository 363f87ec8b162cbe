"""An upload under the team's storage quota (service.storage.usage), checked twice: before the body is
read, against its declared size (Content-Length: the whole multipart body, an upper bound of its files),
so a full team is refused before it sends gigabytes; and when it is recorded, against its files' bytes
(nothing when the team already holds the same content), one recording per team at a time, which also
settles uploads that raced. A refused upload's objects leave the dataset store unless a dataset row already
names that content."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.config import Settings
from service.datasets import ops, store
from service.datasets.schemas import DatasetCreated
from service.errors import ApiError
from service.storage import usage
from service.store.models import Dataset, Team
from worker.contract.sources import dataset_key


def check_room(session: Session, settings: Settings, team_id: int, declared: str | None) -> None:
    """Before the body is read: 409 when its declared size (0 when not declared) would not fit. Closes the
    session: no snapshot is held while the body streams in."""
    try:
        team = session.get(Team, team_id)
        if team is not None:  # else recording says so (403)
            size = int(declared) if declared is not None and declared.isdigit() else 0
            usage.check_upload(session, settings, team, size)
    finally:
        session.close()


def _holders(session: Session, digest: str, team_id: int | None = None) -> int:
    query = select(func.count()).select_from(Dataset).where(Dataset.digest == digest)
    if team_id is not None:
        query = query.where(Dataset.team_id == team_id)
    return session.scalar(query) or 0


def record(
    *, session: Session, settings: Settings, team_id: int, key_id: str, item: ops.Upload
) -> DatasetCreated:
    """`ops.record` once the upload's files fit the team's quota; 409 with the numbers otherwise. The team's
    row is locked until the upload is committed: on PostgreSQL, where writes run side by side, two uploads
    checked at once would each see room that the other then takes (SQLite has one writer at a time)."""
    team = session.get(Team, team_id, with_for_update=True)
    if team is not None:
        adding = (
            0 if _holders(session, item.digest, team_id) else sum(int(str(f["bytes"])) for f in item.files)
        )
        try:
            usage.check_upload(session, settings, team, adding)
        except ApiError:
            if not _holders(session, item.digest):  # stored for this upload alone: remove it again
                target = store.open_store(settings.dataset_store_uri)
                target.delete_prefix(dataset_key(item.digest).rsplit("/", 1)[0])
            raise
    return ops.record(session=session, team_id=team_id, key_id=key_id, item=item)
