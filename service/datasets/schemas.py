"""The datasets API's bodies: one version of a dataset, a list of datasets, a name's versions."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class DatasetFile(BaseModel):
    name: str
    sha256: str = Field(description="SHA-256 of the file's bytes (hex)")
    bytes: int


class DatasetPublic(BaseModel):
    """One version of a dataset: its content address, files, row counts, and who may read it."""

    name: str
    version: int
    team: str = Field(description="the team that uploaded it")
    task: str
    description: str | None = None
    digest: str = Field(description="SHA-256 of the manifest (one `<sha256>  <name>` line per file, sorted)")
    ref: str = Field(description="what a job spec's `data` names it by: dataset:sha256:<digest>")
    size_bytes: int
    files: list[DatasetFile]
    rows: dict[str, int] = Field(description="examples per split, as training reads them")
    published: bool = Field(description="readable by every team (set by an admin)")
    created_at: datetime


class DatasetCreated(DatasetPublic):
    created: bool = Field(description="false: the same content was the latest version already (nothing new)")


class DatasetSummary(DatasetPublic):
    """The latest version the caller may read, and how many versions it may read."""

    versions: int


class DatasetsPublic(BaseModel):
    data: list[DatasetSummary]
    count: int


class DatasetVersions(BaseModel):
    name: str
    team: str
    data: list[DatasetPublic] = Field(description="oldest first")
