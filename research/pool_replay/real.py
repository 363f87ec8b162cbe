"""The real path: submit the workload over REST at its arrival times, wait for every job to end, and read
back what happened to each (the service's own record, plus the trials' clocks synced from MLflow).

Times are seconds since the replay's start, on this machine's clock (the server, the drivers and the trials
all run here): `submitted` is the job's `created_at`, `admitted` its transition to DISPATCHED (the engine's
admission), `finished` its `finished_at`; each trial's `sleep_start`/`sleep_end` are the trial's own, and
`tune_start`/`tune_end` the driver's (Tune started it / saw it complete).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from research.pool_replay.cluster import Stack
from research.pool_replay.workload import spec, trial_sleeps
from research.pool_sim.workload import Job, Team

FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


@dataclass
class JobTimes:
    """One job's path through the pool, on either side (real or simulated); seconds since the start."""

    id: str
    team: str
    gpus: float  # per trial
    submitted: float
    admitted: float | None
    first_start: float | None  # the first trial's sleep began
    finished: float | None  # the job left the pool
    sleeps: list[tuple[float, float]] = field(default_factory=list)  # per trial: (sleep start, end)
    held: list[tuple[float, float]] = field(default_factory=list)  # per trial: Tune's start and end
    state: str = "SUCCEEDED"


def _at(value: str | None, t0: float) -> float | None:
    return datetime.fromisoformat(value).timestamp() - t0 if value else None


def _record(detail: dict[str, Any], job: Job, team: str, t0: float) -> JobTimes:
    dispatched = [t["at"] for t in detail["transitions"] if t["to_state"] == "DISPATCHED"]
    sleeps, held = [], []
    for trial in detail["trials"]:
        m = trial["metrics"]
        if "sleep_start" in m and "sleep_end" in m:
            sleeps.append((m["sleep_start"] - t0, m["sleep_end"] - t0))
        if "tune_start" in m and "tune_end" in m:
            held.append((m["tune_start"] - t0, m["tune_end"] - t0))
    return JobTimes(
        id=job.id,
        team=team,
        gpus=job.gpus_per_trial,
        submitted=_at(detail["created_at"], t0) or 0.0,
        admitted=_at(dispatched[0], t0) if dispatched else None,
        first_start=min((s for s, _ in sleeps), default=None),
        finished=_at(detail["finished_at"], t0),
        sleeps=sorted(sleeps),
        held=sorted(held),
        state=detail["state"],
    )


def replay(
    s: Stack, teams: list[Team], jobs: list[Job], *, timeout_s: float, log: Any = None
) -> tuple[float, list[JobTimes], dict[str, list[float]]]:
    """Submit `jobs` at their arrivals; return the start (epoch s), each job's times and its trials' sleeps
    in the driver's order. Raises TimeoutError when the jobs are not all final within `timeout_s`."""
    assert s.server is not None
    names = {t.id: t.name for t in teams}
    clients = {name: httpx.Client(base_url=s.server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
               for name, key in s.keys.items()}  # fmt: skip
    ids: dict[str, str] = {}  # workload id -> service job id
    order: dict[str, list[float]] = {}
    t0 = time.time()
    for job in jobs:
        time.sleep(max(0.0, t0 + job.arrival - time.time()))
        doc = spec(job, next(t for t in teams if t.id == job.team_id))
        response = clients[names[job.team_id]].post("/api/v1/jobs", json=doc)
        response.raise_for_status()
        ids[job.id] = response.json()["id"]
        order[job.id] = trial_sleeps(doc)
        if log:
            log(f"{time.time() - t0:6.1f} s  submitted {job.id} ({names[job.team_id]}) as {ids[job.id]}")
    deadline = time.monotonic() + timeout_s
    details: dict[str, dict[str, Any]] = {}
    while len(details) < len(jobs):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(jobs) - len(details)} jobs still running after {timeout_s:.0f} s")
        time.sleep(3.0)
        for job in jobs:
            if job.id in details:
                continue
            detail = clients[names[job.team_id]].get(f"/api/v1/jobs/{ids[job.id]}").json()
            complete = detail["state"] != "SUCCEEDED" or len(detail["trials"]) >= len(order[job.id])
            if detail["state"] in FINAL and complete:
                details[job.id] = detail
                if log:
                    log(f"{time.time() - t0:6.1f} s  {job.id} {detail['state']}")
    for client in clients.values():
        client.close()
    records = [_record(details[j.id], j, names[j.team_id], t0) for j in jobs]
    return t0, records, order
