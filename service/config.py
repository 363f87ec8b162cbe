"""The control plane's settings: one pydantic-settings class, read from the environment.

Deployment-wide names stay unprefixed as docs/architecture.md §7 gives them (`DATABASE_URL`, `RAY_ADDRESS`,
`MLFLOW_TRACKING_URI`); everything else is `SMARTUNE_*`. Unset locations derive from the data directory:
the embedded default keeps the job store, MLflow and Tune's storage side by side in it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, IPvAnyNetwork, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from service.secret_checks import secret_problems
from worker.contract.node_types import NodeType, parse_node_types

MLFLOW_TEAM_USER_PREFIX = "smartune-team-"  # a team's MLflow user: this and the team's name


def _env(name: str) -> AliasChoices:
    """Accept the field by its environment name and, in code, by its own name."""
    return AliasChoices(name, f"SMARTUNE_{name}")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        # No `.env` file: the team stack's `.env` (docker compose reads it from the repository root) must not
        # leak into a `smartune serve` started from the same checkout. Settings come from the environment.
        env_prefix="SMARTUNE_",
        extra="ignore",
        validate_by_name=True,
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
    ray_head_port: int = Field(6379, ge=1, le=65535, description="local head only: its GCS port")
    keep_ray: bool = Field(False, description="local head only: leave a head this service started running")
    ray_start_args: str = Field(
        "", description="local head only: more `ray start` flags, space-separated (ports, object store size)"
    )
    ray_temp_dir: Path | None = Field(
        None, description="local head only: Ray's session folder (default /tmp/ray)"
    )
    mlflow_tracking_uri: str | None = Field(None, validation_alias=_env("MLFLOW_TRACKING_URI"))
    # MLflow's client and pyarrow/boto3 read these two themselves; they are declared only to be checked.
    mlflow_tracking_password: str | None = Field(
        None, validation_alias=AliasChoices("MLFLOW_TRACKING_PASSWORD"), repr=False, exclude=True
    )
    aws_secret_access_key: str | None = Field(
        None, validation_alias=AliasChoices("AWS_SECRET_ACCESS_KEY"), repr=False, exclude=True
    )
    mlflow_experiment: str = "smartune"
    mlflow_ui_url: str | None = Field(
        None,
        description="base of the MLflow UI for run links; unset = the tracking server, or `mlflow ui` "
        "locally; set but empty = no links",
    )
    # MLflow users per team (service.engine.mlflow_teams, docs/deployment.md): set, the service logs in as
    # MLflow's admin (MLFLOW_TRACKING_USERNAME / _PASSWORD) to create them, and each job logs in as its team.
    mlflow_team_secret: str | None = Field(
        None,
        repr=False,
        exclude=True,
        description="derives each team's MLflow password (HMAC-SHA256 of the team's name, hex; 32 characters "
        "at least): set, every team gets the MLflow user `smartune-team-<team>` with MANAGE on its own "
        "experiment and registered models only, and its jobs log in with it; unset = no MLflow users (a local "
        "store, or one login for every job)",
    )
    storage_path: str | None = Field(None, description="Tune storage (checkpoints); unset = data dir")
    glue_dir: Path | None = Field(None, description="GLUE folder passed to jobs and allowed as a data root")
    data_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="folders every team's local data/model paths may lie under (os.pathsep list); empty = "
        "none but the GLUE folder and the packaged model. Never the data dir: it holds every team's state",
    )
    hub_allow: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="hub ids (fnmatch patterns, comma list) a job may download; empty = no hub access, and "
        "workers run with HF_HUB_OFFLINE=1",
    )
    # Uploaded datasets (service.datasets, docs/datasets.md).
    trial_placement: Literal["best-fit", "ray"] = Field(
        "best-fit",
        description="where Ray puts a job's GPU trials: best-fit hints each on the fullest node that fits it, so "
        "fractions pack and whole GPUs stay free (docs/pool_at_scale.md); ray leaves Ray's rule (the emptiest node)",
    )
    unplaceable_timeout_s: float = Field(
        900.0,
        ge=0,
        description="seconds a sweep waits with no trial running while no live Ray node can hold its pending "
        "trials (a node lost for good) before it fails with the reason, so a retry can resume it once the pool "
        "is back; 0 = wait forever (an autoscaler will bring the node)",
    )
    dataset_store: str | None = Field(
        None,
        description="where uploaded datasets are kept, content-addressed: a local folder, or s3://bucket/prefix "
        "(endpoint and credentials from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, as for "
        "MLflow's artifacts and Tune's storage); unset = <data dir>/datasets",
    )
    dataset_max_bytes: int = Field(
        256 * 1024 * 1024, ge=1024, description="an upload's whole body: every file and the multipart framing"
    )
    dataset_max_files: int = Field(8, ge=1, le=64, description="files per upload")
    dataset_check_timeout_s: float = Field(
        300.0, gt=0, description="seconds the training loader may take to read an upload (it runs as a child)"
    )
    sweep_module: str = Field("worker.tune.sweep", description="the Ray job entrypoint module")
    entrypoint_python: str | None = Field(None, description="python of the entrypoint; unset = auto")

    scheduler_interval_s: float = Field(2.0, gt=0, description="seconds between scheduler rounds")
    capacity_ttl_s: float = Field(10.0, ge=0, description="seconds a read of the pool's capacity is kept")
    # The largest Ray node: a submission is judged by it until the pool is read (service.admission); unset =
    # none declared (`smartune serve` declares the head it starts), and a trial of that kind is then a 503.
    largest_node_cpus: float | None = Field(None, ge=0, description="CPUs of the largest Ray node")
    largest_node_gpus: float | None = Field(None, ge=0, description="GPUs of the largest Ray node")
    # An autoscaler adds Ray nodes on demand (service.engine.autoscaler): jobs are judged by what it can add.
    autoscaler: bool = Field(
        False, description="an autoscaler (KubeRay's) adds Ray nodes on demand: jobs are admitted and dispatched "
        "against the live pool and the node types it may add (autoscaler_node_types), and drivers wait for them"
    )  # fmt: skip
    autoscaler_node_types: Annotated[tuple[NodeType, ...], NoDecode] = Field(
        (), description='the node types the autoscaler may add, a JSON list: [{"cpus": 8, "gpus": 1, '
        '"max_workers": 4, "gpu_memory_mb": 81559}] (worker.contract.node_types); needed with autoscaler'
    )  # fmt: skip
    ready_ttl_s: float = Field(
        1.0, ge=0, description="seconds one /readyz answer is reused (it needs no key)"
    )
    migrate_on_start: bool = Field(
        True, description="run the migrations at start; off where a prestart step runs `smartune migrate`"
    )
    max_attempts: int = Field(
        3, ge=1, description="lost attempts of a job before it is FAILED (planned stops do not count)"
    )
    max_job_wall_time_s: float = Field(
        72 * 3600.0, gt=0, description="a job running longer is stopped and FAILED; caps limits.time_budget_s"
    )
    default_gpu_quota: float = Field(1.0, ge=0, description="GPUs a team without its own quota may hold")
    default_cpu_quota: float = Field(8.0, ge=0, description="CPUs a team without its own quota may hold")
    budget_period_days: float = Field(
        30.0, gt=0, le=3660, description="the rolling window of the teams' device-hour budgets (days)"
    )
    # Disk per team (service.storage): datasets, Tune checkpoints, local MLflow artifacts.
    default_storage_quota_gb: float | None = Field(
        None, gt=0, description="GB (10^9 bytes) a team without its own storage quota may keep: its datasets, "
        "Tune checkpoints and local MLflow artifacts; unset = unlimited"
    )  # fmt: skip
    checkpoint_retention_days: float = Field(
        14.0, ge=0, description="days a finished job keeps its best trial's last checkpoint (and, FAILED, each "
        "unfinished trial's, to resume from) before they are deleted too; a team's own wins"
    )  # fmt: skip
    storage_refresh_s: float = Field(
        300.0, gt=0, description="seconds between the engine's measurements of the teams' disk use and its "
        "checkpoint retention passes"
    )  # fmt: skip
    gpu_kind: str | None = Field(
        None, max_length=128, description="the pool's GPU as torch names it (`NVIDIA H100 80GB HBM3`): the "
        "calibration entries GPU trials are estimated with; unset = whichever GPU the table has"
    )  # fmt: skip
    max_spec_bytes: int = Field(
        96 * 1024, ge=1024, description="the spec's canonical JSON: it travels in one environment variable"
    )
    ray_timeout_s: float = Field(10.0, gt=0, description="any one call to Ray's dashboard")
    mlflow_timeout_s: float = Field(30.0, gt=0, description="any one read of a job's runs from MLflow")
    mlflow_syncs_per_s: float = Field(
        20.0,
        gt=0,
        description="running jobs' trial reads from MLflow a second, at most: with more running jobs than a "
        "round's share, each is read less often than every round (a job that ended is read at once)",
    )
    db_timeout_s: float = Field(5.0, gt=0, description="waiting for a database lock or connection")
    engine_lease_s: float = Field(30.0, gt=0, description="the engine lease between replicas")
    max_body_bytes: int = Field(1_048_576, ge=1024)
    max_cells: int = Field(256, ge=1, description="trials (grid cells x seeds) per job")
    max_seeds: int = Field(10, ge=1)
    default_max_concurrent_jobs: int = Field(4, ge=1, description="for teams without their own quota")
    max_queued_jobs_per_team: int = Field(1000, ge=1)
    write_concurrency: int = Field(8, ge=1, description="concurrent write requests (PostgreSQL; SQLite: 1)")
    key_cache_ttl_s: float = Field(
        5.0, ge=0, description="seconds a verified key is trusted without a lookup"
    )
    bootstrap_admin: bool = Field(True, description="create an admin key when there is none")
    bootstrap_key_file: Path | None = Field(
        None,
        description="where the bootstrap admin key is written once (mode 0600); unset = <data dir>/admin-key",
    )
    # The HTTP layer.
    rate_limit_per_s: float = Field(20.0, gt=0, description="requests per second and key, on average")
    rate_limit_burst: int = Field(40, ge=1, description="requests a key may send at once before 429s")
    cors_allow_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="origins allowed by CORS (comma list); empty = closed"
    )
    mlflow_ui_protected: bool = Field(
        False, description="the MLflow UI sits behind authentication: only then does the API hand out links"
    )
    # Operations: logs and metrics.
    log_format: Literal["json", "text"] | None = Field(
        None, description="`json` (one object per line) or `text`; unset = json in production, text otherwise"
    )
    metrics_token: str | None = Field(
        None,
        repr=False,
        description="bearer token that may read /metrics (Prometheus' scrape `authorization`) besides admin "
        "keys; unset = admin keys only",
    )
    # The dashboard (service.dashboard): an API key is exchanged for a signed session cookie.
    dashboard_secret: str | None = Field(
        None,
        repr=False,
        exclude=True,
        description="signs the dashboard's session cookies and CSRF tokens (at least 32 characters); unset = "
        "a random one per process in development (sessions end at restart), the dashboard off in production",
    )
    dashboard_session_ttl_s: float = Field(
        8 * 3600.0, gt=0, le=30 * 86400.0, description="seconds a dashboard login lasts"
    )
    dashboard_secure_cookie: bool | None = Field(
        None, description="the session cookie's Secure flag; unset = when the request came over https"
    )
    # Webhooks (service.notify, docs/webhooks.md): signed POSTs to the teams' URLs when their jobs end.
    webhook_allow_private: bool = Field(
        False, description="let webhook URLs reach loopback, private, link-local and other non-global addresses"
    )  # fmt: skip
    webhook_allow_cidrs: Annotated[list[IPvAnyNetwork], NoDecode] = Field(
        default_factory=list, description="networks (comma list of CIDRs) webhook URLs may reach even though "
        "they are not global, e.g. 10.20.0.0/16 for an internal receiver; multicast stays refused"
    )  # fmt: skip
    webhook_timeout_s: float = Field(5.0, gt=0, le=60, description="each phase of one delivery attempt")
    webhook_max_attempts: int = Field(5, ge=1, le=20, description="attempts per delivery before it is failed")
    webhook_backoff_s: float = Field(
        10.0, ge=0, description="seconds before the second attempt; doubled before each next one"
    )
    webhook_backoff_max_s: float = Field(600.0, ge=0, description="the longest wait between two attempts")
    webhook_concurrency: int = Field(4, ge=1, le=32, description="deliveries in flight at once")
    webhook_max_per_team: int = Field(20, ge=1, description="webhooks one team may register")

    @model_validator(mode="after")
    def _no_default_secrets(self) -> Settings:
        """Outside development, refuse a secret left empty or at a well-known default (`changethis` in
        deploy/env.example): a team stack must not start with the example's passwords."""
        if self.env == "development":
            return self
        problems = [problem for problem in secret_problems(self) if problem]
        if problems:
            raise ValueError(
                f"SMARTUNE_ENV={self.env} refuses default or empty secrets: " + "; ".join(problems)
            )
        return self

    @model_validator(mode="after")
    def _team_logins_need_a_server(self) -> Settings:
        """MLflow users exist only on a tracking server with basic auth, created with its admin's login."""
        if self.mlflow_team_secret is None:
            return self
        if not self.tracking_uri.startswith(("http://", "https://")):
            raise ValueError(
                "SMARTUNE_MLFLOW_TEAM_SECRET needs an MLflow tracking server with basic auth "
                "(MLFLOW_TRACKING_URI=http://...): a local store has no users"
            )
        if not self.mlflow_tracking_password:
            raise ValueError(
                "SMARTUNE_MLFLOW_TEAM_SECRET needs MLflow's admin login (MLFLOW_TRACKING_USERNAME and "
                "MLFLOW_TRACKING_PASSWORD): the service creates the teams' users with it"
            )
        return self

    @field_validator("autoscaler_node_types", mode="before")
    @classmethod
    def _parse_node_types(cls, value: object) -> object:
        if isinstance(value, str):
            return parse_node_types(value) if value.strip() else ()
        return value

    @model_validator(mode="after")
    def _autoscaler_needs_node_types(self) -> Settings:
        if self.autoscaler and not self.autoscaler_node_types:
            raise ValueError(
                "SMARTUNE_AUTOSCALER=1 needs SMARTUNE_AUTOSCALER_NODE_TYPES: the node types it may add, e.g. "
                '[{"cpus": 8, "gpus": 1, "max_workers": 4}]'
            )
        return self

    @property
    def autoscaled_node_types(self) -> tuple[NodeType, ...]:
        """The node types an autoscaler may add; none without one (`autoscaler` off)."""
        return self.autoscaler_node_types if self.autoscaler else ()

    @field_validator("data_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: object) -> object:
        if isinstance(value, str):
            return [p for part in value.split(os.pathsep) for p in part.split(",") if p.strip()]
        return value

    @field_validator("hub_allow", mode="before")
    @classmethod
    def _split_patterns(cls, value: object) -> object:
        if isinstance(value, str):
            return [p.strip() for p in value.split(",") if p.strip()]
        return value

    @field_validator("cors_allow_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        if isinstance(value, str):
            return [o.strip() for o in value.split(",") if o.strip()]
        return value

    @field_validator("webhook_allow_cidrs", mode="before")
    @classmethod
    def _split_cidrs(cls, value: object) -> object:
        if isinstance(value, str):
            return [c.strip() for c in value.split(",") if c.strip()]
        return value

    @field_validator("data_dir", "glue_dir")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        return value.expanduser().resolve() if value is not None else None

    @property
    def json_logs(self) -> bool:
        """Whether the logs are JSON lines: `log_format`, else JSON in production only."""
        return (self.log_format or ("json" if self.env == "production" else "text")) == "json"

    @property
    def sqlalchemy_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'smartune.db'}"

    @property
    def tracking_uri(self) -> str:
        return self.mlflow_tracking_uri or f"sqlite:///{self.data_dir / 'mlflow.db'}"

    @property
    def artifact_root(self) -> str | None:
        """Where a new MLflow experiment keeps its artifacts: the data dir beside a local store; None for a
        tracking server, which decides (it proxies them to its own store, S3 in the team stack)."""
        local_store = self.tracking_uri.startswith(("sqlite:", "file:")) or "://" not in self.tracking_uri
        return str(self.data_dir / "mlartifacts") if local_store else None

    @property
    def dataset_store_uri(self) -> str:
        """The dataset store: `dataset_store`, else `<data dir>/datasets` (what a worker derives from
        SMARTUNE_DATA_DIR when SMARTUNE_DATASET_STORE is unset)."""
        return self.dataset_store or str(self.data_dir / "datasets")

    @property
    def default_storage_quota_bytes(self) -> int | None:
        gb = self.default_storage_quota_gb
        return None if gb is None else int(gb * 1e9)

    @property
    def tune_storage(self) -> str:
        return self.storage_path or str(self.data_dir / "ray_results")

    def allowed_roots(self, team_roots: list[str] | None = None) -> list[Path]:
        """Where a team's local paths may lie: the deployment's roots, the team's own, the GLUE folder."""
        given: list[Path | str] = [*self.data_roots, *(team_roots or [])]
        roots = [Path(p).expanduser().resolve() for p in given]
        return roots + ([self.glue_dir] if self.glue_dir else [])

    def team_experiment(self, team: str) -> str:
        """One MLflow experiment per team: a team's runs never sit beside another's."""
        return f"{self.mlflow_experiment}-{team}"

    def team_mlflow_login(self, team: str) -> tuple[str, str] | None:
        """The team's MLflow user and password: `smartune-team-<team>` and the hex HMAC-SHA256 of the team's
        name under `mlflow_team_secret` (nothing to store; a new secret gives every team a new password at
        the service's next start). None without the secret."""
        if not self.mlflow_team_secret:
            return None
        digest = hmac.new(self.mlflow_team_secret.encode(), team.encode(), hashlib.sha256).hexdigest()
        return f"{MLFLOW_TEAM_USER_PREFIX}{team}", digest

    def team_storage(self, team: str) -> str:
        """Tune storage per team: checkpoints (loaded with torch.load) never shared across teams."""
        base = self.tune_storage
        return f"{base.rstrip('/')}/{team}" if "://" in base else str(Path(base) / team)


@lru_cache
def get_settings() -> Settings:
    return Settings()
