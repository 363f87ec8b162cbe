"""Datasets: upload a task's files (validated by training's loader, stored by content), list, read, publish,
delete. Thin routes over service.datasets; a job spec names a dataset as `data: dataset:NAME[@V]` or
`dataset:sha256:<digest>` (docs/datasets.md).

A team sees its own datasets and the versions an admin published; another team's private dataset is a
404. Admins see all, and name the team (`?team=`) where two teams use one name.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from service.api.deps import (
    AdminKey,
    CurrentKey,
    SessionDep,
    SettingsDep,
    TeamKey,
    WriterDep,
    WriteSessionDep,
)
from service.api.responses import KEYED, errors
from service.datasets import crud, ops
from service.datasets.schemas import (
    DatasetCreated,
    DatasetPublic,
    DatasetsPublic,
    DatasetSummary,
    DatasetVersions,
)
from service.errors import ApiError
from service.storage import uploads
from worker.contract.names import HIDDEN_PATTERN
from worker.contract.sources import DATASET_NAME
from worker.contract.tasks import TASKS

router = APIRouter(prefix="/datasets", tags=["datasets"])

Name = Annotated[str, Path(min_length=1, max_length=100)]
Version = Annotated[int, Path(ge=1, le=10**9)]
TeamQuery = Annotated[
    str | None, Query(max_length=64, description="the owning team, where two teams use one name")
]
NOT_FOUND = {404: "no such dataset (or version) among those the caller may read"}
AMBIGUOUS = {409: "several teams have a dataset by that name the caller may read: name one with ?team="}
# What `service.datasets.validate.fields` accepts as a name: DATASET_NAME, after trimming whitespace.
UPLOAD_NAME = rf"^\s*{DATASET_NAME.pattern.removeprefix('^').removesuffix('$')}\s*$"
UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["name", "task", "files"],
                    "properties": {
                        "name": {
                            "type": "string",
                            "minLength": 1,
                            "pattern": UPLOAD_NAME,
                            "not": {"pattern": r"^\s*sha256\s*$"},
                            "description": "the dataset's name in the team: 1-100 letters, digits, '.', '_' or "
                            "'-', starting with a letter or digit, not 'sha256' (spaces around it are trimmed)",
                        },
                        "task": {
                            "type": "string",
                            "minLength": 1,
                            "pattern": r"\S",
                            "description": f"the task it is data of, case-insensitive: one of {', '.join(sorted(TASKS))}",
                        },
                        "description": {
                            "type": "string",
                            "not": {"pattern": HIDDEN_PATTERN},
                            "description": "at most 2000 characters, trimmed; shown as is, so no control or "
                            "format character (newlines, bidirectional overrides, zero-width characters: Unicode "
                            "Cc, Cf, Cs, Zl, Zp)",
                        },
                        "files": {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                            "description": "one file per split: train.tsv, dev.tsv, ... (or .csv, .jsonl)",
                        },
                    },
                }
            }
        },
    }
}


@router.post(
    "",
    status_code=201,
    response_model=DatasetCreated,
    openapi_extra=UPLOAD_BODY,
    responses={
        200: {"model": DatasetCreated, "description": "the same content was the latest version already"},
        **errors(
            400,
            *KEYED,
            403,
            409,
            413,
            415,
            422,
            notes={
                403: "the key belongs to no team (admin keys cannot upload)",
                409: "the upload would take the team past its storage quota (`storage`: used, quota and each "
                "kind in bytes, `upload_bytes`)",
                413: "the upload exceeds SMARTUNE_DATASET_MAX_BYTES (`limit_bytes`)",
                422: "a field is missing or wrong, a file is no split of the task, or a row cannot be read "
                "(`file`, `line`, `column` name it)",
            },
        ),  # fmt: skip
    },
)
async def create_dataset(
    request: Request, response: Response, session: WriteSessionDep, key: TeamKey, settings: SettingsDep,
    writer: WriterDep, read_session: SessionDep,
) -> DatasetCreated:  # fmt: skip
    """Upload a dataset (multipart: name, task, optional description, one file per split). Every row is read
    as training reads it; the files are stored under their SHA-256. Same name, other content: version n+1.
    Refused (409) when it would take the team past its storage quota."""
    headers = request.headers
    team_id = key.team_id or 0
    declared = headers.get("content-length")
    await run_in_threadpool(uploads.check_room, read_session, settings, team_id, declared)
    item = await ops.take(request.stream(), headers.get("content-type"), declared, settings)
    created = await writer.run(session, lambda: uploads.record(
        session=session, settings=settings, team_id=team_id, key_id=key.key_id, item=item))  # fmt: skip
    response.status_code = 201 if created.created else 200
    return created


@router.get("", response_model=DatasetsPublic, responses=errors(*KEYED))
def read_datasets(session: SessionDep, key: CurrentKey) -> DatasetsPublic:
    """The datasets the caller may read (its team's and the published ones), each at its latest version."""
    listed = crud.list_datasets(session=session, scope=key.scope)
    data = [DatasetSummary(**crud.public(row).model_dump(), versions=n) for row, n in listed]
    return DatasetsPublic(data=data, count=len(data))


@router.get(
    "/{name}",
    response_model=DatasetVersions,
    responses=errors(*KEYED, 404, 409, 422, notes={**NOT_FOUND, **AMBIGUOUS}),
)
def read_dataset(name: Name, session: SessionDep, key: CurrentKey, team: TeamQuery = None) -> DatasetVersions:
    """A dataset's versions the caller may read, oldest first."""
    rows = crud.versions(session=session, scope=key.scope, name=name, team=team)
    return DatasetVersions(name=name, team=rows[0].team.name, data=[crud.public(r) for r in rows])


@router.get(
    "/{name}/{version}",
    response_model=DatasetPublic,
    responses=errors(*KEYED, 404, 409, 422, notes={**NOT_FOUND, **AMBIGUOUS}),
)
def read_dataset_version(
    name: Name, version: Version, session: SessionDep, key: CurrentKey, team: TeamQuery = None
) -> DatasetPublic:
    """One version: its digest, files with their SHA-256 and sizes, and rows per split."""
    return crud.public(crud.version(session=session, scope=key.scope, name=name, number=version, team=team))


@router.post(
    "/{name}/{version}/publish",
    response_model=DatasetPublic,
    responses=errors(*KEYED, 403, 404, 409, 422, notes={403: "admin keys only", **NOT_FOUND, **AMBIGUOUS}),
)
async def publish_dataset(
    name: Name,
    version: Version,
    session: WriteSessionDep,
    _admin: AdminKey,
    writer: WriterDep,
    team: TeamQuery = None,
) -> DatasetPublic:
    """Let every team read this version (admins only); jobs of any team may then name it."""

    def publish() -> DatasetPublic:
        row = crud.version(session=session, scope=None, name=name, number=version, team=team)
        row.published = True
        session.commit()
        return crud.public(row)

    return await writer.run(session, publish)


@router.delete(
    "/{name}/{version}",
    response_model=DatasetPublic,
    responses=errors(
        *KEYED,
        403,
        404,
        409,
        422,
        notes={
            403: "a published dataset of another team: only its team or an admin may delete it",
            **NOT_FOUND,
            409: "an unfinished job reads it, or several teams have a dataset by that name (?team=)",
        },
    ),  # fmt: skip
)
async def delete_dataset(
    name: Name, version: Version, session: WriteSessionDep, key: CurrentKey, settings: SettingsDep,
    writer: WriterDep, team: TeamQuery = None,
) -> DatasetPublic:  # fmt: skip
    """Delete a version (its files too, unless another version has the same content). Refused while a job
    that has not finished reads it; an audit of a finished job that read it can no longer re-run."""

    def delete() -> DatasetPublic:
        row = crud.version(session=session, scope=key.scope, name=name, number=version, team=team)
        if key.scope is not None and row.team_id != key.scope:
            raise ApiError(403, f"dataset {name}@{version} belongs to team {row.team.name}; only it or an admin "
                                "may delete it")  # fmt: skip
        deleted = crud.public(row)
        ops.delete(session=session, settings=settings, row=row)
        return deleted

    return await writer.run(session, delete)
