"""The control plane's settings: one pydantic-settings class, read from the environment (and `.env`).

Deployment-wide names stay unprefixed as docs/architecture.md §7 gives them (`DATABASE_URL`, `RAY_ADDRESS`,
`MLFLOW_TRACKING_URI`); everything else is `SMARTUNE_*`. Unset locations derive from the data directory:
the embedded default keeps the job store, MLflow and Tune's storage side by side in it.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def _env(name: str) -> AliasChoices:
    """Accept the field by its environment name and, in code, by its own name."""
    return AliasChoices(name, f"SMARTUNE_{name}")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="SMARTUNE_", env_file=".env", extra="ignore", validate_by_name=True
    )

    env: Literal["development", "production"] = "development"
    host: str = Field("127.0.0.1", description="address the API listens on")
    port: int = Field(8000, ge=1, le=65535)
    data_dir: Path = Field(Path("~/.smartune"), description="job store, MLflow store, Tune storage")

    database_url: str | None = Field(None, validation_alias=_env("DATABASE_URL"))
    ray_address: str | None = Field(
        None, validation_alias=_env("RAY_ADDRESS"), description="Ray dashboard URL; unset = local head"
    )
    ray_auth_token: str | None = Field(None, validation_alias=_env("RAY_AUTH_TOKEN"), repr=False)
    ray_num_cpus: int | None = Field(None, ge=1, description="local head only; unset = detected")
    ray_num_gpus: int | None = Field(None, ge=0, description="local head only; logical GPUs allowed")
    ray_dashboard_port: int = Field(8265, ge=1, le=65535, description="local head only")
    ray_temp_dir: Path | None = Field(
        None, description="local head only: Ray's session folder (default /tmp/ray)"
    )
    mlflow_tracking_uri: str | None = Field(None, validation_alias=_env("MLFLOW_TRACKING_URI"))
    mlflow_experiment: str = "smartune"
    mlflow_ui_url: str | None = Field(
        None,
        description="base of the MLflow UI for run links; unset = the tracking server, or `mlflow ui` locally",
    )
    storage_path: str | None = Field(None, description="Tune storage (checkpoints); unset = data dir")
    glue_dir: Path | None = Field(None, description="GLUE folder passed to jobs and allowed as a data root")
    data_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list, description="folders local data/model paths must lie under (os.pathsep list)"
    )
    sweep_module: str = Field("worker.tune.sweep", description="the Ray job entrypoint module")
    entrypoint_python: str | None = Field(None, description="python of the entrypoint; unset = auto")

    scheduler_interval_s: float = Field(2.0, gt=0, description="seconds between scheduler rounds")
    capacity_ttl_s: float = Field(10.0, ge=0, description="seconds a read of the pool's capacity is kept")
    max_attempts: int = Field(3, ge=1, description="attempts of a job before a lost one is FAILED")
    max_body_bytes: int = Field(1_048_576, ge=1024)
    max_cells: int = Field(256, ge=1, description="trials (grid cells x seeds) per job")
    max_seeds: int = Field(10, ge=1)
    default_max_concurrent_jobs: int = Field(4, ge=1, description="for teams without their own quota")
    max_queued_jobs_per_team: int = Field(1000, ge=1)
    write_concurrency: int = Field(8, ge=1, description="concurrent write requests (PostgreSQL; SQLite: 1)")
    key_cache_ttl_s: float = Field(
        5.0, ge=0, description="seconds a verified key is trusted without a lookup"
    )
    bootstrap_admin: bool = Field(True, description="create and print an admin key when there is none")

    @field_validator("data_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: object) -> object:
        if isinstance(value, str):
            return [p for part in value.split(os.pathsep) for p in part.split(",") if p.strip()]
        return value

    @field_validator("data_dir", "glue_dir")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        return value.expanduser().resolve() if value is not None else None

    @property
    def sqlalchemy_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'smartune.db'}"

    @property
    def tracking_uri(self) -> str:
        return self.mlflow_tracking_uri or f"sqlite:///{self.data_dir / 'mlflow.db'}"

    @property
    def artifact_root(self) -> str:
        return str(self.data_dir / "mlartifacts")

    @property
    def tune_storage(self) -> str:
        return self.storage_path or str(self.data_dir / "ray_results")

    @property
    def allowed_roots(self) -> list[Path]:
        roots = [p.expanduser().resolve() for p in self.data_roots] or [self.data_dir]
        return roots + ([self.glue_dir] if self.glue_dir else [])


@lru_cache
def get_settings() -> Settings:
    return Settings()
