"""What the dashboard's pages show, as plain dicts for the templates: functions on a session, no FastAPI.

Every job read here was found through `crud.get_job(team_id=viewer scope)`, so a team's key only ever sees
its own jobs (admins see all), exactly as the REST API. The public job view (`job_public`) is the REST
API's own, so error texts are cleaned the same way for a team's key and MLflow links appear only where
the deployment protects its MLflow UI.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import yaml
from sqlalchemy.orm import Session

from service import audits
from service.api.deps import Principal
from service.api.redact import public_audit, tenant_text
from service.api.views import job_detail, job_public
from service.config import Settings
from service.dashboard import paper
from service.dashboard.tasks import task_rows
from service.errors import ApiError, not_found
from service.series import mean_std
from service.store import crud
from service.store.models import FINAL_STATES, Job, JobKind, JobState, Trial
from worker.contract.model_registry import registered_model_name
from worker.contract.spec import JobSpec

PAGE_SIZE = 25
STATES = [s.value for s in JobState]
SEED = "seed"


def load_job(session: Session, principal: Principal, job_id: str) -> Job:
    job = crud.get_job(session=session, job_id=job_id, team_id=principal.scope)
    if job is None:
        raise not_found("job", job_id)
    return job


def progress(job: Job, counts: dict[str, int]) -> dict[str, Any]:
    """Trials done / planned and epochs done / planned (planned epochs: the spec's, per trial)."""
    done = sum(n for state, n in counts.items() if state in ("TERMINATED", "ERROR", "STOPPED"))
    epochs = _planned_epochs(job) * job.n_trials
    return {
        "trials_done": done,
        "trials_running": counts.get("RUNNING", 0),
        "trials_planned": job.n_trials,
        "epochs_done": counts.get("epochs", 0),
        "epochs_planned": epochs,
        "percent": round(100.0 * min(1.0, counts.get("epochs", 0) / epochs), 1) if epochs else 0.0,
    }


def _planned_epochs(job: Job) -> int:
    spec = json.loads(job.spec_json)
    epochs = spec.get("training", {}).get("epochs")
    axis = spec.get("search_space", {}).get("axes", {}).get("epochs")
    if axis and axis.get("values"):  # epochs swept: the longest of its values bounds the plan
        return int(max(axis["values"]))
    return int(epochs) if isinstance(epochs, int | float) else 0


def _row(job: Job, settings: Settings, admin: bool, counts: dict[str, int]) -> dict[str, Any]:
    public = job_public(job, settings, admin=admin).model_dump(mode="json")
    return {
        **public,
        "progress": progress(job, counts),
        "final": job.state in FINAL_STATES,
        "verdict": verdict(job),
    }


def verdict(job: Job) -> str | None:
    """An audit's verdict (PASS, FAIL, NOT-COMPARABLE) once its report is in; None for a sweep."""
    if job.kind != JobKind.AUDIT:
        return None
    found = (job.summary or {}).get("verdict")
    return str(found) if found else None


def jobs_page(
    session: Session,
    settings: Settings,
    principal: Principal,
    *,
    states: list[str],
    text: str | None,
    page: int,
) -> dict[str, Any]:
    """One page of the jobs list (newest first) with each job's progress, and the pager."""
    if text and "\x00" in text:  # PostgreSQL refuses NUL in a string: say so here, not with a 500
        raise ApiError(422, "the search text cannot contain a NUL character", field="query.q")
    offset = (page - 1) * PAGE_SIZE
    rows, count = crud.list_jobs(
        session=session, team_id=principal.scope, states=states, limit=PAGE_SIZE, offset=offset, text=text
    )
    counts = crud.trial_progress(session=session, job_ids=[j.id for j in rows])
    pages = max(1, math.ceil(count / PAGE_SIZE))
    if page > pages and count:
        raise ApiError(
            404, f"page {page} does not exist: {count} jobs make {pages} pages", field="query.page"
        )
    return {
        "jobs": [_row(j, settings, principal.is_admin, counts[j.id]) for j in rows],
        "count": count,
        "page": page,
        "pages": pages,
        "states": states,
        "text": text or "",
    }


def _cells(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Trials grouped by their cell (params without the seed): mean, std and n of the best dev score."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for trial in trials:
        cell = {k: v for k, v in trial["params"].items() if k != SEED}
        groups[json.dumps(cell, sort_keys=True)].append(trial)
    cells = []
    for key, members in groups.items():
        scores = [t["best_score"] for t in members if t["best_score"] is not None]
        mean, std = mean_std(scores) if scores else (None, None)
        cells.append(
            {"params": json.loads(key), "n": len(scores), "mean": mean, "std": std, "trials": members}
        )
    return sorted(cells, key=lambda c: (c["mean"] is None, -(c["mean"] or 0.0)))


def best_spec(spec: dict[str, Any], params: dict[str, Any]) -> str:
    """The job's spec narrowed to one cell: every swept value becomes a one-value grid axis (the preset's
    other axes dropped), over the same seeds, so it re-runs exactly that configuration. YAML."""
    narrowed = json.loads(json.dumps(spec))
    narrowed["name"] = f"{spec.get('name') or 'sweep'}-best"
    narrowed["search_space"] = {
        "axes": {k: {"type": "grid", "values": [v]} for k, v in sorted(params.items()) if k != SEED}
    }
    return str(yaml.safe_dump(narrowed, sort_keys=False))


def job_page(session: Session, settings: Settings, principal: Principal, job: Job) -> dict[str, Any]:
    """The job page: the REST detail (state, trials, attempts, transitions), plus its spec as YAML, its
    progress, the cells by mean score and the best one's spec, and what the charts may choose from."""
    detail = job_detail(session, job, settings, admin=principal.is_admin).model_dump(mode="json")
    trials = detail["trials"]
    counts: dict[str, int] = dict(Counter(t["state"] for t in trials))
    counts["epochs"] = sum(t["last_epoch"] or 0 for t in trials)
    cells = _cells(trials)
    best = next((c for c in cells if c["mean"] is not None), None)
    axes = sorted({k for t in trials for k in t["params"]} - {SEED})
    swept = [a for a in axes if len({json.dumps(t["params"].get(a)) for t in trials}) > 1] or axes
    if not trials:  # nothing ran yet: the spec's grid, so the charts stand there waiting for the first epoch
        swept = spec_axes(detail["spec"])
    metric_keys = sorted({k for t in trials for k in t["metrics"]})
    summary = job.summary or {}
    is_smart = str(detail["spec"].get("method", "")).startswith("smart")
    final = job.state in FINAL_STATES
    return {
        "job": detail,
        "final": final,
        "progress": progress(job, counts),
        "spec_yaml": yaml.safe_dump(detail["spec"], sort_keys=False),
        "main_metric": summary.get("main_metric") or "score",
        "cells": cells[:10],
        "n_cells": len(cells),
        "best": best,
        "best_spec": best_spec(detail["spec"], best["params"]) if best else None,
        "paper": paper.beside(detail["spec"], cells),
        "tasks": task_rows(trials, job.summary),  # a multitask job's per-task results; else none
        "axes": swept,
        "regularizer_keys": [k for k in metric_keys if k.startswith("train_") and k not in NOT_REGULARIZER]
        or (["train_r_s"] if is_smart and not final else []),  # a SMART sweep's first epoch is on its way
        "is_smart": is_smart,
        "can_submit": principal.team_id is not None and principal.team_id == job.team_id,
        "audits": [_audit_row(a) for a in audits.list_audits(session=session, job_id=job.id)],
        "can_audit": job.state == JobState.SUCCEEDED and any(t["best_score"] is not None for t in trials),
        # the downloads (service/dashboard/downloads.py): the best trial's checkpoint, the registered models
        "best_trial": best_trial_id(job, crud.job_trials(session=session, job_id=job.id)),
        "registered": registered_versions(job),
    }


def best_trial_id(job: Job, trials: Sequence[Trial]) -> str | None:
    """The job's best trial: its summary's, else the trial row with the highest best score."""
    best = (job.summary or {}).get("best")
    if isinstance(best, dict) and best.get("trial_id"):
        return str(best["trial_id"])
    scored = [t for t in trials if t.best_score is not None]
    return max(scored, key=lambda t: t.best_score or 0.0).trial_id if scored else None


def registered_versions(job: Job) -> dict[str, dict[str, Any]]:
    """Task -> the job's registered version (`name`, `version`, `uri`) from its summary: only entries named
    as the job's team's model of the task, with a version."""
    summary: dict[str, Any] = job.summary or {}
    entries: dict[str, Any] = {}
    if isinstance(models := summary.get("registered_models"), dict):  # a grid over tasks: one each
        entries = dict(models)
    elif isinstance(tasks := summary.get("tasks"), dict):  # a multitask job: each task's best and its model
        entries = {t: r.get("registered_model") for t, r in tasks.items() if isinstance(r, dict)}
    elif isinstance(model := summary.get("registered_model"), dict):  # one task: the spec's (a list of one)
        spec_task = json.loads(job.spec_json).get("task")
        tasks_named = spec_task if isinstance(spec_task, list) else [spec_task]
        entries = {str(t): model for t in tasks_named if isinstance(t, str)}
    out = {}
    for task, entry in entries.items():
        if not isinstance(entry, dict) or entry.get("version") is None:
            continue
        name = registered_model_name(job.team.name, str(task))
        if entry.get("name") == name:
            out[str(task)] = {"name": name, "version": str(entry["version"]),
                              "uri": f"models:/{name}/{entry['version']}"}  # fmt: skip
    return out


def spec_axes(spec: dict[str, Any]) -> list[str]:
    """The axes a spec sweeps (more than one value; the seed aside), from its grid: what a job's charts
    will show before its first trial reports. A spec that no longer validates shows none."""
    try:
        grid = JobSpec.model_validate(spec).grid_axes()
    except ValueError:
        return []
    return sorted(name for name, values in grid.items() if name != SEED and len(values) > 1)


def _audit_row(audit: Job) -> dict[str, Any]:
    return {
        "id": audit.id,
        "state": audit.state,
        "verdict": (audit.summary or {}).get("verdict"),
        "created_at": audit.created_at,
    }


def audit_page(session: Session, settings: Settings, principal: Principal, job: Job) -> dict[str, Any]:
    """An audit job: its state and timeline, the audited job, and once done its report (as the REST API
    gives it): a verdict per trial, the metrics that differ first, then every provenance field."""
    detail = job_detail(session, job, settings, admin=principal.is_admin).model_dump(mode="json")
    report = public_audit(job.summary) if job.summary else None
    for trial in (report or {}).get("trials", []):
        trial["metrics"].sort(key=lambda m: (m["match"], m["epoch"], m["metric"]))
        trial["mismatches"] = sum(1 for m in trial["metrics"] if not m["match"])
        trial["drift"] = [p for p in trial["provenance"] if not p["same"]]
    return {
        "job": detail,
        "final": job.state in FINAL_STATES,
        "report": report,
        "plan": json.loads(job.spec_json)["audit"],
    }


# train_* metrics that describe throughput or the plain loss rather than the regulariser
NOT_REGULARIZER = frozenset({"train_loss", "train_seconds", "train_task_loss", "train_nonfinite_skips"})


def compare_page(
    session: Session, settings: Settings, principal: Principal, job: Job, trial_ids: list[str]
) -> dict[str, Any]:
    """2-5 trials of one job side by side: each parameter in a row, rows whose values differ marked."""
    unique = list(dict.fromkeys(trial_ids))
    if not 2 <= len(unique) <= 5:
        raise ApiError(
            422, f"pick 2 to 5 different trials to compare ({len(unique)} given)", field="query.trial"
        )
    detail = job_detail(session, job, settings, admin=principal.is_admin).model_dump(mode="json")
    by_id = {t["trial_id"]: t for t in detail["trials"]}
    missing = [t for t in unique if t not in by_id]
    if missing:
        raise ApiError(404, f"job {job.id} has no trial {missing[0]!r}", field="query.trial")
    chosen = [by_id[t] for t in unique]
    names = sorted({k for t in chosen for k in t["params"]})
    rows = []
    for name in names:
        values = [t["params"].get(name) for t in chosen]
        rows.append({"name": name, "cells": values, "differs": len({json.dumps(v) for v in values}) > 1})
    for name in ("best_score", "last_epoch", "state"):
        values = [t[name] for t in chosen]
        rows.append({"name": name, "cells": values, "differs": len({json.dumps(v) for v in values}) > 1})
    return {"job": detail, "trials": chosen, "rows": rows}


def pool_page(session: Session, principal: Principal, limit: int = 20) -> dict[str, Any]:
    """The recent decisions on the viewer's jobs (every job's for admins), newest first."""
    rows = crud.recent_transitions(session=session, team_id=principal.scope, limit=limit)
    return {
        "decisions": [
            {
                "at": t.at,
                "job_id": t.job_id,
                "from": t.from_state,
                "to": t.to_state,
                "reason": t.reason if principal.is_admin else tenant_text(t.reason),
            }
            for t in rows
        ]
    }
