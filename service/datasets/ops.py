"""Dataset operations behind the routes: take an upload in, publish, delete, and pin a spec's `data`.

An upload goes: body to disk under the size limit (service.datasets.upload) -> fields and file names
checked -> every row read by training's loader (service.datasets.validate) -> digest of the manifest ->
objects into the store (files first, manifest last; skipped when the manifest is there: same content) ->
a row in the job store. Only the last step holds the database's write lock.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.to_thread
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.config import Settings
from service.costs.sizes import Uploaded
from service.datasets import crud, store, upload, validate
from service.datasets.schemas import DatasetCreated
from service.errors import ApiError
from service.store.models import Dataset, Team
from worker.contract.sources import dataset_digest, dataset_key, manifest_text, parse_dataset_ref
from worker.contract.spec import JobSpec

_CHECKS = anyio.CapacityLimiter(2)  # uploads read and stored at once (each runs a child process)


@dataclass(frozen=True)
class Upload:
    name: str
    task: str
    description: str | None
    digest: str
    files: list[dict[str, object]]  # {"name", "sha256", "bytes"}, sorted by name
    rows: dict[str, int]


async def take(
    stream: AsyncIterator[bytes], content_type: str | None, length: str | None, settings: Settings
) -> Upload:
    """Receive, check and store an upload; the row is recorded by `record`."""
    boundary = upload.boundary_of(content_type)
    scratch = settings.data_dir / "uploads"
    await anyio.to_thread.run_sync(lambda: scratch.mkdir(parents=True, exist_ok=True))
    folder = Path(await anyio.to_thread.run_sync(lambda: tempfile.mkdtemp(dir=scratch)))
    try:
        body = folder / "body"
        await upload.receive(stream, body, declared=length, limit=settings.dataset_max_bytes)
        return await anyio.to_thread.run_sync(
            lambda: _check_and_store(body, boundary, settings), limiter=_CHECKS
        )
    finally:
        await anyio.to_thread.run_sync(lambda: shutil.rmtree(folder, ignore_errors=True))


def _check_and_store(body: Path, boundary: bytes, settings: Settings) -> Upload:
    parts = body.parent / "parts"
    parts.mkdir()
    form = upload.split(body, boundary, parts, max_files=settings.dataset_max_files)
    body.unlink()  # the parts hold it all now
    name, task, description = validate.fields(form)
    validate.file_names(form, task)
    laid_out = body.parent / "check" / validate.folder_name(task)  # as a trial lays it out
    laid_out.parent.mkdir()
    parts.rename(laid_out)
    rows = validate.rows(task, laid_out, settings.dataset_check_timeout_s)
    entries = sorted((f.name, f.sha256) for f in form.files)
    digest = dataset_digest(entries)
    target = store.open_store(settings.dataset_store_uri)
    if not target.exists(dataset_key(digest)):  # the manifest, written last: present = complete
        for staged in form.files:
            target.put(dataset_key(digest, staged.name), laid_out / staged.name)
        manifest = laid_out.parent / "manifest"
        manifest.write_text(manifest_text(entries), encoding="utf-8")
        target.put(dataset_key(digest), manifest)
    files = [
        {"name": f.name, "sha256": f.sha256, "bytes": f.size}
        for f in sorted(form.files, key=lambda f: f.name)
    ]
    return Upload(name, task.name, description, digest, files, rows)


def record(*, session: Session, team_id: int, key_id: str, item: Upload) -> DatasetCreated:
    """The upload's row (a new version, or the latest when it has the same content), committed."""
    team = session.get(Team, team_id)
    if team is None:  # deleted after the key was cached
        raise ApiError(403, "this key's team no longer exists")
    for last_try in (False, True):
        try:
            row, created = crud.add_version(
                session=session,
                team=team,
                name=item.name,
                task=item.task,
                description=item.description,
                digest=item.digest,
                files=item.files,
                rows=item.rows,
                key_id=key_id,
            )
            session.commit()
            break
        except IntegrityError:  # a concurrent upload took this version number: number again
            session.rollback()
            if last_try:
                raise
    return DatasetCreated(**crud.public(row).model_dump(), created=created)


def delete(*, session: Session, settings: Settings, row: Dataset) -> None:
    """Remove a version; its objects go too when no other row has the same content. 409 while a job that
    has not finished reads it (its trials would find nothing to fetch)."""
    last = crud.digest_users(session=session, digest=row.digest) == 1
    if last and (jobs := crud.unfinished_jobs(session=session, digest=row.digest)):
        raise ApiError(409, f"dataset {row.name}@{row.version} is read by unfinished job(s) {', '.join(jobs)}; "
                            "delete it once they have finished")  # fmt: skip
    session.delete(row)
    session.commit()
    if last:
        store.open_store(settings.dataset_store_uri).delete_prefix(dataset_key(row.digest).rsplit("/", 1)[0])


def pin(*, session: Session, team: Team, spec: JobSpec) -> JobSpec:
    """`spec` with `data: dataset:NAME[@V]` pinned to `dataset:sha256:<digest>`, so a later upload does not
    change what the job reads; a digest the team may not read, an unknown name or version, a dataset of
    another task, or a column mapping beside a dataset: 422 naming the field."""
    ref = parse_dataset_ref(spec.data) if spec.data else None  # the spec validated its syntax already
    if ref is None:
        return spec
    if spec.columns is not None:
        raise ApiError(422, "columns: a dataset is read with the columns it was validated with; drop "
                            "`columns` (upload files with the task's column names)", field="columns")  # fmt: skip
    if ref.digest is not None:
        row = crud.by_digest(session=session, scope=team.id, digest=ref.digest)
        if row is None:
            raise ApiError(422, f"data: no dataset with digest {ref.digest} that team {team.name!r} may read",
                           field="data")  # fmt: skip
    else:
        try:
            rows = crud.versions(session=session, scope=team.id, name=str(ref.name))
        except ApiError as err:
            why = "no such dataset" if err.status_code == 404 else str(err.detail).split(";")[0]
            raise ApiError(422, f"data: {spec.data!r}: {why}", field="data") from None
        chosen = [r for r in rows if ref.version is None or r.version == ref.version]
        if not chosen:
            raise ApiError(422, f"data: dataset {ref.name!r} has no version {ref.version} (it has "
                                f"{', '.join(str(r.version) for r in rows)})", field="data")  # fmt: skip
        row = chosen[-1]
    wrong = [t for t in spec.tasks if t != row.task]
    if wrong:
        raise ApiError(422, f"data: dataset {row.name}@{row.version} is a {row.task!r} dataset; the spec "
                            f"trains {wrong[0]!r}", field="data")  # fmt: skip
    return spec.model_copy(update={"data": f"dataset:sha256:{row.digest}"})


def uploaded_rows(*, session: Session, team: Team, spec: JobSpec) -> Uploaded | None:
    """The recorded row counts of the dataset a pinned spec's `data` names (`dataset:sha256:...`), for the
    estimate (service.costs.sizes); None when it names no uploaded dataset the team may read."""
    ref = parse_dataset_ref(spec.data) if spec.data else None
    if ref is None or ref.digest is None:
        return None
    row = crud.by_digest(session=session, scope=team.id, digest=ref.digest)
    return None if row is None else Uploaded(label=f"{row.name}@{row.version}", rows=dict(row.rows))
