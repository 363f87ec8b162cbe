"""Helpers for the service tests: auth headers, a tiny spec, team factories, submitting."""

from __future__ import annotations

import copy
from typing import Any

from fastapi.testclient import TestClient

from service.schemas import TeamCreate
from service.store import crud
from service.store.db import Database

QUICK_SPEC: dict[str, Any] = {
    "name": "quick",
    "task": "rte",
    "model": "tiny-random",
    "method": "vanilla",
    "training": {
        "epochs": 1,
        "batch_size": 8,
        "max_seq_length": 32,
        "max_train_samples": 32,
        "max_eval_samples": 16,
    },
    "search_space": {"axes": {"learning_rate": {"type": "grid", "values": [1e-4, 5e-4]}}},
    "seeds": [1],
    "resources": {"cpus": 1, "gpus": 0},
}


def spec(**changes: Any) -> dict[str, Any]:
    """QUICK_SPEC with top-level fields replaced (`resources={"gpus": 1}` merges into nested dicts)."""
    out = copy.deepcopy(QUICK_SPEC)
    for name, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(name), dict):
            out[name] = {**out[name], **value}
        else:
            out[name] = value
    return out


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def make_team(db: Database, name: str, **quota: Any) -> str:
    """Create a team (gpu_quota, cpu_quota, max_concurrent_jobs, weight, priorities, data_roots); return a key."""
    with db.write_sessions() as session:
        team = crud.create_team(session=session, team_in=TeamCreate(name=name, **quota))
        _row, key = crud.create_api_key(session=session, team=team)
        session.commit()
    return key


def make_admin(db: Database) -> str:
    with db.write_sessions() as session:
        _row, key = crud.create_api_key(session=session, team=None, is_admin=True)
        session.commit()
    return key


def submit(
    client: TestClient, key: str, body: dict[str, Any] | None = None, **headers: str
) -> dict[str, Any]:
    response = client.post("/api/v1/jobs", json=body or spec(), headers={**auth(key), **headers})
    assert response.status_code in (200, 201), response.text
    return dict(response.json())
