"""`smartune bench load` (see cli/bench_cmd.py): the whole service under a crowd, for real.

A real `smartune serve` (bench/launch.py: uvicorn, the engine, a local Ray head of its own with 2 CPUs or
the Ray cluster `--ray-address` names, MLflow in a temporary data directory; the job store on SQLite there,
or on the database `--database-url` names, e.g. a PostgreSQL of your own) takes `--clients` concurrent clients for `--seconds`. Each client has its own API key in one of `--teams` teams; it submits a tiny real job (one
trial of a tiny random BERT on a synthetic RTE-shaped folder) whenever its team's queue has room, and
otherwise reads one of its team's jobs or lists them. A 429 is obeyed (`Retry-After`). Then every accepted
job must reach a final state within `--drain-timeout` seconds, each read back from the store.

Reported: requests, p50/p95/p99 per endpoint, status counts, 5xx (the target: zero), accepted jobs and
their final states, the time to drain. Traffic goes to 127.0.0.1 only. A `--database-url` database keeps
what the run made in it (its teams `load-<run>-<n>`, their keys and jobs): give the benchmark one of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from bench.api_load import _percentiles
from bench.launch import Served, serve

FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
JOB: dict[str, Any] = {  # one trial, a few seconds of training: the driver's start dominates
    "task": "rte",
    "model": "tiny-random",
    "method": "smart",
    "training": {"epochs": 1, "batch_size": 8, "max_seq_length": 32, "max_train_samples": 16},
    "resources": {"cpus": 1, "gpus": 0},
}


def synthetic_glue(root: Path, rows: int = 64) -> Path:
    """An RTE-shaped GLUE folder (train.tsv, dev.tsv) of made-up sentence pairs: the benchmark needs no
    downloaded data."""
    rng = random.Random(0)
    words = "the a cat dog runs sleeps near far big small red blue house river".split()
    folder = root / "RTE"
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", rows), ("dev", rows // 2)):
        lines = ["index\tsentence1\tsentence2\tlabel"]
        for i in range(n):
            pair = [" ".join(rng.choices(words, k=8)) for _ in range(2)]
            lines.append(f"{i}\t{pair[0]}\t{pair[1]}\t{rng.choice(['entailment', 'not_entailment'])}")
        (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return root


def _keys(database_url: str, clients: int, teams: int) -> tuple[str, list[tuple[str, str]]]:
    """An admin key, and (team, key) for each client, made on the store directly (the teams named after
    this run, so a rerun on the same database makes new ones)."""
    from service.schemas import TeamCreate
    from service.store import crud
    from service.store.db import connect, migrate

    db = connect(database_url)
    migrate(db)
    out: list[tuple[str, str]] = []
    with db.write_sessions() as session:
        _row, admin = crud.create_api_key(session=session, team=None, is_admin=True, name="bench admin")
        run = secrets.token_hex(3)
        made = [
            crud.create_team(session=session, team_in=TeamCreate(name=f"load-{run}-{t}"))
            for t in range(teams)
        ]
        for n in range(clients):
            team = made[n % teams]
            _row, key = crud.create_api_key(session=session, team=team, name=f"client {n}")
            out.append((team.name, key))
        session.commit()
    db.dispose()
    return admin, out


def service_env(root: Path, queue_limit: int) -> dict[str, str]:
    """The service's settings for a load run: made-up data under `root`, `queue_limit` queued jobs per team."""
    return {
        "SMARTUNE_GLUE_DIR": str(synthetic_glue(root / "glue")),
        "SMARTUNE_MAX_QUEUED_JOBS_PER_TEAM": str(queue_limit),
        "SMARTUNE_BOOTSTRAP_ADMIN": "false",
        "SMARTUNE_SCHEDULER_INTERVAL_S": "0.5",  # dispatch soon after a submission or a job's end
        "SMARTUNE_CAPACITY_TTL_S": "1",
        "HF_HUB_OFFLINE": "1",  # the tiny model is built here: nothing to download
        "TRANSFORMERS_OFFLINE": "1",
    }


class Tally:
    """Latency and statuses per endpoint, shared by the clients (one event loop: no locks)."""

    def __init__(self) -> None:
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.statuses: dict[str, Counter[int]] = defaultdict(Counter)
        self.accepted: dict[str, list[str]] = defaultdict(list)  # team -> job ids
        self.full_until: dict[str, float] = {}  # team -> when to try submitting again
        self.server_errors: list[str] = []
        self.transport_errors: list[str] = []  # requests that got no answer (refused, reset, timed out)
        # Every request: (wall-clock s when sent, endpoint, latency s, status; 0 = no answer).
        self.timeline: list[tuple[float, str, float, int]] = []
        self.client_errors: list[str] = []  # the first few 4xx other than 429 (none expected)
        self.refusals: Counter[str] = (
            Counter()
        )  # 429s by reason: the team's queue limit, the key's rate limit

    def report(self) -> dict[str, Any]:
        return {
            name: {**_percentiles(samples), "statuses": dict(sorted(self.statuses[name].items()))}
            for name, samples in sorted(self.latency.items())
        }


async def _client(http: Any, team: str, n: int, tally: Tally, until: float) -> None:
    import aiohttp

    rng = random.Random(n)
    i = 0
    while time.monotonic() < until:
        own = tally.accepted[team]
        if time.monotonic() >= tally.full_until.get(team, 0.0):
            name, request = "POST /jobs", http.post("/api/v1/jobs", json={**JOB, "seeds": [n * 10_000 + i]})
            i += 1
        elif own and rng.random() < 0.5:
            name, request = "GET /jobs/{id}", http.get(f"/api/v1/jobs/{rng.choice(own)}")
        else:
            name, request = "GET /jobs", http.get("/api/v1/jobs", params={"limit": 20})
        sent, start = time.time(), time.perf_counter()
        try:
            async with request as response:
                payload = await response.read()
        except (aiohttp.ClientError, TimeoutError) as err:  # no answer came: refused, reset, timed out
            tally.transport_errors.append(f"{name}: {type(err).__name__}: {err}"[:300])
            tally.timeline.append((sent, name, time.perf_counter() - start, 0))
            continue
        tally.latency[name].append(time.perf_counter() - start)
        tally.timeline.append((sent, name, tally.latency[name][-1], response.status))
        tally.statuses[name][response.status] += 1
        if response.status >= 500:
            tally.server_errors.append(f"{name} {response.status}: {payload[:300]!r}")
        elif response.status >= 400 and response.status != 429 and len(tally.client_errors) < 5:
            tally.client_errors.append(f"{name} {response.status}: {payload[:300]!r}")
        elif name == "POST /jobs" and response.status == 201:
            own.append(json.loads(payload)["id"])
        elif response.status == 429:
            wait = float(response.headers.get("Retry-After", "1"))
            if b"queued jobs" in payload:  # the team's queue is full: read for a while
                tally.refusals["queue limit"] += 1
                tally.full_until[team] = time.monotonic() + wait
            else:  # the key's rate limit
                tally.refusals["rate limit"] += 1
                await asyncio.sleep(wait)


async def _load(url: str, keys: list[tuple[str, str]], seconds: float) -> Tally:
    import aiohttp

    tally = Tally()
    until = time.monotonic() + seconds
    sessions = [
        aiohttp.ClientSession(
            url, headers={"Authorization": f"Bearer {key}"}, timeout=aiohttp.ClientTimeout(60)
        )
        for _team, key in keys
    ]
    try:
        await asyncio.gather(
            *(
                _client(http, team, n, tally, until)
                for n, (http, (team, _key)) in enumerate(zip(sessions, keys, strict=True))
            )
        )
    finally:
        await asyncio.gather(*(s.close() for s in sessions))
    return tally


def _drain(
    url: str, admin: str, job_ids: list[str], timeout: float
) -> tuple[dict[str, str], list[str], float]:
    """Each job's state once all are final (or at the timeout), the first few jobs that did not succeed
    (with the service's message), and the seconds it took."""
    import httpx

    started = time.monotonic()
    states: dict[str, str] = {}
    failures: list[str] = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=30) as http:
        while True:
            for job_id in job_ids:
                if states.get(job_id) not in FINAL:
                    answer = http.get(f"/api/v1/jobs/{job_id}")
                    job = answer.json() if answer.status_code == 200 else {}
                    states[job_id] = job.get("state", f"HTTP {answer.status_code}")
                    if states[job_id] in ("FAILED", "CANCELLED") and len(failures) < 3:
                        failures.append(f"{job_id} {states[job_id]}: {job.get('message')}")
            if all(s in FINAL for s in states.values()) or time.monotonic() - started > timeout:
                return states, failures, time.monotonic() - started
            time.sleep(1)  # drain_s is read to the second


def run_load(
    *,
    clients: int,
    teams: int,
    seconds: float,
    queue_limit: int,
    drain_timeout: float,
    database_url: str | None = None,
    ray_address: str | None = None,
) -> dict[str, Any]:
    """Start the service (on `database_url`, or SQLite in a temp folder; on the Ray cluster at `ray_address`,
    or a local head of its own); load it; drain; stop it; return the report."""
    with tempfile.TemporaryDirectory(prefix="smartune-load-") as tmp:
        root = Path(tmp)
        url = database_url or f"sqlite:///{root / 'data' / 'smartune.db'}"
        (root / "data").mkdir()
        admin, keys = _keys(url, clients, teams)
        server: Served | None = None
        try:
            env = service_env(root, queue_limit)
            if ray_address:  # a running cluster instead of a head of the service's own
                env["RAY_ADDRESS"] = ray_address
            server = serve(root / "data", database_url=url, env=env)
            tally = asyncio.run(_load(server.url, keys, seconds))
            accepted = [job for ids in tally.accepted.values() for job in ids]
            states, failures, drained = _drain(server.url, admin, accepted, drain_timeout)
        finally:
            if server is not None:
                server.stop()
    endpoints = tally.report()
    requests = sum(e["n"] for e in endpoints.values())
    return {
        "database": url.split(":", 1)[0].split("+", 1)[0],  # the dialect: sqlite, postgresql
        "clients": clients,
        "teams": teams,
        "seconds": seconds,
        "queue_limit_per_team": queue_limit,
        "requests": requests,
        "requests_per_s": round(requests / seconds, 1),
        "server_errors": len(tally.server_errors),
        "first_server_errors": tally.server_errors[:3],
        "transport_errors": len(tally.transport_errors),
        "first_transport_errors": tally.transport_errors[:3],
        "first_client_errors": tally.client_errors,
        "endpoints": endpoints,
        "refusals_429": dict(tally.refusals),
        "accepted_jobs": len(accepted),
        "final_states": dict(Counter(states.values())),
        "first_failures": failures,
        "all_final": all(s in FINAL for s in states.values()),
        "drain_s": round(drained, 1),
    }


def main(args: argparse.Namespace) -> int:
    urls = args.database_url or ["sqlite"]
    report = [
        run_load(
            clients=args.clients,
            teams=args.teams,
            seconds=args.seconds,
            queue_limit=args.queue_limit,
            drain_timeout=args.drain_timeout,
            database_url=None if url == "sqlite" else url,
            ray_address=args.ray_address,
        )
        for url in urls
    ]
    print(json.dumps(report, indent=2))  # noqa: T201
    ok = all(r["server_errors"] == 0 and r["transport_errors"] == 0 and r["all_final"] for r in report)
    return 0 if ok else 1
