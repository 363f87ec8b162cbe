"""What the API shows of a team's disk: bytes used against the quota in effect, by kind."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class StoragePublic(BaseModel):
    used_bytes: int = Field(description="datasets + checkpoints + artifacts")
    quota_bytes: int | None = Field(
        description="the quota in effect (the team's, else SMARTUNE_DEFAULT_STORAGE_QUOTA_GB); null = unlimited"
    )
    datasets_bytes: int = Field(description="the team's uploaded datasets, each content counted once (exact)")
    checkpoints_bytes: int = Field(description="the team's Tune storage, as last measured")
    artifacts_bytes: int = Field(
        description="the team's runs' MLflow artifacts and logged models where MLflow keeps them locally, "
        "as last measured"
    )
    measured_at: datetime | None = Field(
        description="when checkpoints and artifacts were last measured (every SMARTUNE_STORAGE_REFRESH_S); "
        "null = not yet"
    )


class StorageCheck(StoragePublic):
    """A dry run's storage: the team's disk use against its quota, and whether a submission would pass it."""

    fits: bool = Field(
        description="false: a submission is refused with 409 and these numbers (the team is at or past its "
        "quota, and a job adds checkpoints)"
    )
    refusal: str | None = Field(None, description="a dry run: what the submission would be told")
