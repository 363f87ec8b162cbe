"""Rows to API models: the public view of a job (with its MLflow links), a job's detail, a key, a registered
model.

`admin` chooses the view: an admin key sees every text as stored; a team's key sees error texts without
log tails or server paths (service.api.redact). MLflow links are handed out only when the deployment says
its MLflow UI sits behind authentication (`mlflow_ui_protected`). Every link is to the caller's own
team's experiment, runs or registered models; with MLflow users per team (SMARTUNE_MLFLOW_TEAM_SECRET) the
team's MLflow login opens exactly these and nothing of another team.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict
from urllib.parse import quote

from sqlalchemy.orm import Session

from service.api.redact import tenant_text
from service.config import Settings
from service.costs import budget
from service.costs.schemas import CostPublic
from service.engine.registered_models import TeamModel
from service.engine.tracking import run_url
from service.schemas import (
    ApiKeyPublic,
    AttemptPublic,
    JobDetail,
    JobPublic,
    Progress,
    RegisteredModelPublic,
    TransitionPublic,
    TrialPublic,
)
from service.store import crud
from service.store.models import FINAL_STATES, ApiKey, Job

LOCAL_MLFLOW_UI = "http://127.0.0.1:5000"


def mlflow_ui_base(settings: Settings) -> str | None:
    """Where the MLflow UI of the tracking store is, for run and model links: configured
    (SMARTUNE_MLFLOW_UI_URL; set but empty: no links), else the tracking server itself, or for a local store
    the address `mlflow ui --backend-store-uri <store>` serves on by default. None (no links) while the UI is
    open to anyone who can reach it."""
    if not settings.mlflow_ui_protected:
        return None
    uri = settings.tracking_uri
    if settings.mlflow_ui_url is not None:
        # docker-compose.yml passes the variable through, empty unless the deployer set it: its tracking
        # URI (http://mlflow:5000) is the compose network's, which no browser reaches (deploy/env.example)
        return settings.mlflow_ui_url or None
    if uri.startswith(("http://", "https://")):
        return uri
    return LOCAL_MLFLOW_UI if uri.startswith(("sqlite:", "file:", "/")) else None


def model_public(model: TeamModel, settings: Settings) -> RegisteredModelPublic:
    """A team's registered model, with its page in the MLflow UI where links are handed out."""
    ui = mlflow_ui_base(settings)
    url = f"{ui.rstrip('/')}/#/models/{quote(model.name, safe='')}" if ui else None
    return RegisteredModelPublic(**asdict(model), mlflow_url=url)


def _text(text: str | None, admin: bool) -> str | None:
    return text if admin else tenant_text(text)


def job_public(job: Job, settings: Settings, *, admin: bool) -> JobPublic:
    return JobPublic(
        id=job.id,
        name=job.name,
        team=job.team.name,
        kind=job.kind,
        audit_of=job.audit_of,
        state=job.state,
        priority=job.priority,
        spec_hash=job.spec_hash,
        n_trials=job.n_trials,
        cpus_per_trial=job.cpus_per_trial,
        gpus_per_trial=job.gpus_per_trial,
        attempt=job.attempt,
        submission_id=job.submission_id,
        wait_reason=job.wait_reason,
        message=_text(job.message, admin),
        best_value=job.best_value,
        mlflow_experiment_id=job.mlflow_experiment_id,
        mlflow_parent_run_id=job.mlflow_parent_run_id,
        mlflow_url=run_url(mlflow_ui_base(settings), job.mlflow_experiment_id, job.mlflow_parent_run_id),
        created_at=job.created_at,
        queued_at=job.queued_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        updated_at=job.updated_at,
    )


def job_detail(session: Session, job: Job, settings: Settings, *, admin: bool) -> JobDetail:
    trials = crud.job_trials(session=session, job_id=job.id)
    ui = mlflow_ui_base(settings)
    trial_views = [
        TrialPublic.model_validate(t).model_copy(
            update={"mlflow_url": run_url(ui, job.mlflow_experiment_id, t.mlflow_run_id)}
        )
        for t in trials
    ]
    return JobDetail(
        **job_public(job, settings, admin=admin).model_dump(),
        spec=json.loads(job.spec_json),
        progress=Progress(total=job.n_trials, by_state=dict(Counter(t.state for t in trials))),
        cost=job_cost(session, job),
        trials=trial_views,
        attempts=[
            AttemptPublic.model_validate(a).model_copy(update={"message": _text(a.message, admin)})
            for a in crud.job_attempts(session=session, job_id=job.id)
        ],
        transitions=[
            TransitionPublic.model_validate(t).model_copy(update={"reason": _text(t.reason, admin) or ""})
            for t in crud.job_transitions(session=session, job_id=job.id)
        ],
    )


def job_cost(session: Session, job: Job) -> CostPublic:
    """The estimate at submission, the hours measured so far and, once the job ended, the actual and the
    relative error (estimated - actual) / actual."""
    measured = budget.job_hours(session, job) if job.state not in FINAL_STATES else job.actual_hours
    actual = job.actual_hours if job.state in FINAL_STATES else None
    estimated = job.estimated_hours
    error = (estimated - actual) / actual if estimated is not None and actual else None
    asha = (job.estimate or {}).get("asha")
    return CostPublic(
        unit=job.device_unit or budget.unit_of(job),
        estimated_hours=estimated,
        actual_hours=actual,
        measured_hours=measured,
        relative_error=error,
        expected_with_asha=asha.get("expected_device_hours") if isinstance(asha, dict) else None,
    )


def key_public(key: ApiKey) -> ApiKeyPublic:
    return ApiKeyPublic(
        key_id=key.key_id,
        team=key.team.name if key.team else None,
        is_admin=key.is_admin,
        name=key.name,
        created_at=key.created_at,
        revoked_at=key.revoked_at,
    )
