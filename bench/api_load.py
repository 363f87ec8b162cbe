"""`smartune bench api` (see cli/bench_cmd.py): the control plane's latency under load, and the
scheduler's decision time.

1. A real uvicorn server (bench/api_server.py: its own process, SQLite in a temp data dir, no Ray: a pool of
   zero GPUs so every job stays queued while the engine keeps scheduling) takes `POST /api/v1/jobs` and then
   `GET /api/v1/jobs/{id}` from `--clients` concurrent clients; p50/p95/p99/max latency and errors.
   Targets on the reference machine (2 CPUs): p99 < 150 ms for submits, < 50 ms for reads, zero errors.
2. One scheduling round over 10,000 queued jobs from 50 teams: the pure decision (`scheduler.plan`) and the
   whole round as the engine runs it (read the queue from SQLite, decide). Target: < 50 ms per decision.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from typing import Any

SPEC: dict[str, Any] = {
    "task": "rte",
    "model": "tiny-random",
    "method": "smart",
    "training": {"epochs": 1, "batch_size": 8, "max_seq_length": 32, "max_train_samples": 32},
    "search_space": {"axes": {"learning_rate": {"type": "grid", "values": [1e-4, 5e-4]}}},
    "resources": {"cpus": 1, "gpus": 1},
}


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(round(p * (len(ordered) - 1))))] * 1000

    return {
        "n": len(ordered),
        "p50_ms": round(q(0.50), 2),
        "p95_ms": round(q(0.95), 2),
        "p99_ms": round(q(0.99), 2),
        "max_ms": round(ordered[-1] * 1000, 2),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 2),
    }


def _team_key(data_dir: str) -> str:
    from service.config import Settings
    from service.schemas import TeamCreate
    from service.store import crud
    from service.store.db import connect, migrate

    db = connect(Settings(data_dir=data_dir, database_url=None).sqlalchemy_url)
    migrate(db)
    with db.write_sessions() as session:
        team = crud.create_team(session=session, team_in=TeamCreate(name="bench"))
        _row, key = crud.create_api_key(session=session, team=team)
        session.commit()
    db.dispose()
    return key


async def _load(
    url: str, key: str, clients: int, per_client: int, job_ids: list[str] | None
) -> dict[str, Any]:
    """`clients` concurrent clients, each sending `per_client` requests back to back (a closed loop).

    The client is aiohttp (which ray[default] brings): httpx's own CPU cost, on a 2-core machine shared
    with the server, would dominate what is measured.
    """
    import aiohttp

    latencies: list[float] = []
    errors: list[str] = []
    created: list[str] = []
    connector = aiohttp.TCPConnector(limit=clients)
    headers = {"Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession(url, headers=headers, connector=connector) as http:

        async def client(n: int) -> None:
            rng = random.Random(n)
            for i in range(per_client):
                start = time.perf_counter()
                if job_ids is None:
                    body = {**SPEC, "name": f"bench {n}-{i}", "seeds": [n * per_client + i]}
                    request, expected = http.post("/api/v1/jobs", json=body), 201
                else:
                    request, expected = http.get(f"/api/v1/jobs/{rng.choice(job_ids)}"), 200
                async with request as response:
                    payload = await response.read()
                latencies.append(time.perf_counter() - start)
                if response.status != expected:
                    errors.append(f"{response.status}: {payload[:200]!r}")
                elif job_ids is None:
                    created.append(json.loads(payload)["id"])

        started = time.perf_counter()
        await asyncio.gather(*(client(n) for n in range(clients)))
        elapsed = time.perf_counter() - started
    return {
        **_percentiles(latencies),
        "errors": len(errors),
        "first_errors": errors[:3],
        "requests_per_s": round(len(latencies) / elapsed, 1),
        "ids": created,
    }


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def api_latency(clients: int, submits: int, reads: int) -> dict[str, Any]:
    """Start a server, submit `submits` jobs per client, then read `reads` jobs per client."""
    import httpx

    with tempfile.TemporaryDirectory(prefix="smartune-bench-") as data_dir:
        key, port = _team_key(data_dir), _free_port()
        env = {**os.environ, "SMARTUNE_SCHEDULER_INTERVAL_S": "2"}
        env.pop("DATABASE_URL", None)
        cmd = [sys.executable, "-m", "bench.api_server", data_dir, str(port)]
        server = subprocess.Popen(cmd, env=env)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the benchmark server did not start")
                time.sleep(0.2)
            asyncio.run(_load(url, key, clients, 2, None))  # warm-up: connections, first queries
            posts = asyncio.run(_load(url, key, clients, submits, None))
            ids = posts.pop("ids")
            gets = asyncio.run(_load(url, key, clients, reads, ids))
            gets.pop("ids")
        finally:
            server.terminate()
            server.wait(30)
    return {"clients": clients, "post_jobs": posts, "get_job": gets}


def scheduler_round(jobs: int, teams: int, rounds: int) -> dict[str, Any]:
    """Decision time over `jobs` queued jobs from `teams` teams (pure, and with the SQLite read)."""
    from sqlalchemy import insert

    from service.config import Settings
    from service.engine import pool
    from service.engine.scheduler import Resources
    from service.store.db import connect, migrate
    from service.store.models import Job, Team

    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="smartune-bench-") as data_dir:
        db = connect(Settings(data_dir=data_dir, database_url=None).sqlalchemy_url)
        migrate(db)
        now = datetime.now(UTC)
        with db.write_sessions() as session:
            session.execute(
                insert(Team),
                [
                    {"name": f"team{t}", "gpu_quota": 4.0, "weight": 1.0 + t % 3, "default_priority": 0}
                    for t in range(teams)
                ],
            )
            team_ids = [t.id for t in session.query(Team).all()]
            rows = [
                {
                    "id": f"job-{i:012x}",
                    "team_id": team_ids[i % teams],
                    "state": "QUEUED",
                    "priority": rng.choice([0, 0, 0, 5, 10]),
                    "spec_json": "{}",
                    "spec_hash": "0" * 64,
                    "n_trials": rng.choice([1, 4, 36]),
                    "cpus_per_trial": 1.0,
                    "gpus_per_trial": rng.choice([0.5, 1.0, 1.0, 2.0]),
                    "max_concurrent_trials": rng.choice([1, 2]),
                    "attempt": 0,
                    "cleanup_pending": False,
                    "queued_at": now + timedelta(milliseconds=i),
                    "created_at": now,
                    "updated_at": now,
                }
                for i in range(jobs)
            ]
            session.execute(insert(Job), rows)
            session.commit()
        capacity = Resources(cpus=512.0, gpus=64.0)
        pure: list[float] = []
        full: list[float] = []
        admitted = 0
        for _ in range(rounds):
            start = time.perf_counter()
            with db.sessions() as session:
                state = pool.load(session, default_max_jobs=4)
            loaded = time.perf_counter()
            decided = pool.plan_round(state, capacity)
            end = time.perf_counter()
            pure.append(end - loaded)
            full.append(end - start)
            admitted = len(decided.admitted)
        db.dispose()
    return {
        "queued_jobs": jobs,
        "teams": teams,
        "pool": capacity._asdict(),
        "admitted_per_round": admitted,
        "decision": _percentiles(pure),
        "round_with_sqlite_read": _percentiles(full),
    }


def main(args: argparse.Namespace) -> int:
    report = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "api": api_latency(args.clients, args.submits, args.reads),
        "scheduler": scheduler_round(args.queued, args.teams, args.rounds),
    }
    api, sched = report["api"], report["scheduler"]
    report["targets_met"] = {
        "get_p99_below_50ms": api["get_job"]["p99_ms"] < 50,
        "post_p99_below_150ms": api["post_jobs"]["p99_ms"] < 150,
        "zero_errors": api["get_job"]["errors"] == api["post_jobs"]["errors"] == 0,
        "decision_below_50ms": sched["decision"]["p99_ms"] < 50,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for name, row in (("POST /api/v1/jobs", api["post_jobs"]), ("GET /api/v1/jobs/{id}", api["get_job"])):
        print(
            f"{name:<24} {row['n']:>6} requests, {args.clients} clients: p50 {row['p50_ms']:.1f} ms, "
            f"p95 {row['p95_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms, max {row['max_ms']:.1f} ms, "
            f"{row['requests_per_s']:.0f} req/s, {row['errors']} errors"
        )
    print(
        f"scheduler: {sched['queued_jobs']} queued jobs, {sched['teams']} teams: decision p50 "
        f"{sched['decision']['p50_ms']:.1f} ms, p99 {sched['decision']['p99_ms']:.1f} ms; with the SQLite read "
        f"p50 {sched['round_with_sqlite_read']['p50_ms']:.1f} ms"
    )
    print("targets met: " + ", ".join(f"{k}={v}" for k, v in report["targets_met"].items()))
    return 0
