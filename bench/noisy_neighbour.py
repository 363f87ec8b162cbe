"""`smartune bench load --noisy-neighbour` (see cli/bench_cmd.py): does one team at its limits slow another?

On one real `smartune serve` (bench/launch.py, as `bench load` starts it: its own Ray head, SQLite or the
`--database-url` database) the quiet team's crowd (`--clients` clients, one API key each, bench/load.py's
clients: submit when the team's queue has room, otherwise read its jobs) runs for 2 x `--seconds`, cut into
`--rounds` rounds of two equal windows: in the first the quiet team is alone (unloaded), in the second the
noisy team runs beside it (`--noisy-clients` keys with `--noisy-concurrency` requests in flight each,
bench/noisy_tenant.py in a process of its own): it uploads new datasets up to its storage quota
(`--noisy-quota-bytes`) and submits jobs up to its queue limit as fast as its rate limit lets it, and keeps
on through its 409s and 429s. Alternating the windows, rather than one phase after the other, spreads
whatever else the machine does over both sides. A request counts for the window it was sent in; those sent
in the first SETTLE_FRACTION of a window (the switch) count for neither.

Then the admin cancels every job still queued or running (the plain `bench load` shows jobs succeed; here
only the latency matters) and waits for all to be final. Reported: the quiet team's p50/p95/p99 over all its
requests and per endpoint, alone and beside (and per round), the ratio of the p99s, its errors over the whole
run (any answer >= 400 but its own 429s, and requests that got no answer), the noisy team's answers by
endpoint and status. The verdict (`pass`, the exit status): the quiet team's p99 beside the noisy team
within `--p99-bound` (2x) of its p99 alone, no error for it, no 5xx for anyone, every job final.
`with_ray=False` (the integration test) points the service at a closed port instead of a Ray head: jobs are
admitted (a declared node) and stay queued, nothing trains.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from bench.api_load import _percentiles
from bench.launch import free_port, serve
from bench.load import FINAL, JOB, Tally, _load, service_env

REPO = Path(__file__).resolve().parents[1]
TENANT_LEAD_S = 5.0  # the noisy process starts (imports, sessions) before the first window
SETTLE_FRACTION = 0.1  # of each window: requests sent then count for neither side
SIDES = ("alone", "beside")


def _keys(
    database_url: str, quiet_clients: int, noisy_clients: int, noisy_quota_bytes: int
) -> tuple[str, tuple[str, list[str]], list[str]]:
    """An admin key, the quiet team's name and keys, the noisy team's keys (its storage quota set)."""
    from service.schemas import TeamCreate
    from service.store import crud
    from service.store.db import connect, migrate

    db = connect(database_url)
    migrate(db)
    run = secrets.token_hex(3)  # a rerun on the same database makes new teams
    with db.write_sessions() as session:
        _row, admin = crud.create_api_key(session=session, team=None, is_admin=True, name="bench admin")
        quiet = crud.create_team(session=session, team_in=TeamCreate(name=f"quiet-{run}"))
        noisy = crud.create_team(
            session=session, team_in=TeamCreate(name=f"noisy-{run}", storage_quota_bytes=noisy_quota_bytes)
        )
        keys = {
            team.name: [
                crud.create_api_key(session=session, team=team, name=f"client {n}")[1] for n in range(count)
            ]
            for team, count in ((quiet, quiet_clients), (noisy, noisy_clients))
        }
        session.commit()
        quiet_name, noisy_name = quiet.name, noisy.name
    db.dispose()
    return admin, (quiet_name, keys[quiet_name]), keys[noisy_name]


def _run(
    url: str, quiet: tuple[str, list[str]], noisy: dict[str, Any], seconds: float, rounds: int
) -> tuple[Tally, dict[str, Any], float]:
    """The quiet crowd for 2 x `seconds` from the first window on, the noisy tenant (its own process, `noisy`:
    its part of the plan) in every second window; returns the quiet tally, the tenant's report, the start."""
    window = seconds / rounds
    first = time.time() + TENANT_LEAD_S
    windows = [[first + (2 * r + 1) * window, first + (2 * r + 2) * window] for r in range(rounds)]
    plan = {"url": url, "windows": windows, "job": JOB, **noisy}
    tenant = subprocess.Popen([sys.executable, "-m", "bench.noisy_tenant"], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert tenant.stdin is not None and tenant.stdout is not None
        tenant.stdin.write(json.dumps(plan))
        tenant.stdin.close()
        time.sleep(max(0.0, first - time.time()))
        team, keys = quiet
        tally = asyncio.run(_load(url, [(team, key) for key in keys], 2 * seconds))
        out = tenant.stdout.read()  # its one line, at its end: its requests time out after 60 s
        tenant.wait(30)
    finally:
        if tenant.poll() is None:
            tenant.kill()
            tenant.wait(10)
    if tenant.returncode != 0:
        raise RuntimeError(f"the noisy tenant exited with {tenant.returncode}")
    return tally, json.loads(out), first


def _is_error(status: int) -> bool:
    """No answer (0), or a refusal other than the team's own 429s (its queue limit, its rate limit)."""
    return status == 0 or (status >= 400 and status != 429)


def _sides(tally: Tally, first: float, seconds: float, rounds: int) -> dict[str, Any]:
    """The quiet team's requests by side (alone, beside) and round, each by the window it was sent in."""
    window = seconds / rounds
    latency: dict[str, list[float]] = defaultdict(list)  # side -> seconds
    by_endpoint: dict[tuple[str, str], list[float]] = defaultdict(list)
    statuses: dict[tuple[str, str], Counter[int]] = defaultdict(Counter)
    per_round: dict[tuple[str, int], list[float]] = defaultdict(list)
    errors = 0
    for sent, endpoint, seconds_taken, status in tally.timeline:
        errors += _is_error(status)
        index, into = divmod(sent - first, window)
        if not 0 <= index < 2 * rounds or into < SETTLE_FRACTION * window:
            continue
        side = SIDES[int(index) % 2]
        statuses[side, endpoint][status] += 1
        if status:
            latency[side].append(seconds_taken)
            by_endpoint[side, endpoint].append(seconds_taken)
            per_round[side, int(index) // 2].append(seconds_taken)
    report: dict[str, Any] = {"errors": errors}
    for side in SIDES:
        endpoints = sorted({e for s, e in statuses if s == side})
        report[side] = {
            **_percentiles(latency[side] or [0.0]),
            "errors": sum(n for e in endpoints for st, n in statuses[side, e].items() if _is_error(st)),
            "refused_429": sum(statuses[side, e][429] for e in endpoints),
            "p99_ms_per_round": [_percentiles(per_round[side, r] or [0.0])["p99_ms"] for r in range(rounds)],
            "endpoints": {
                e: {
                    **_percentiles(by_endpoint[side, e] or [0.0]),
                    "statuses": dict(sorted(statuses[side, e].items())),
                }
                for e in endpoints
            },
        }
    return report


def _cancel_all(url: str, admin: str, job_ids: list[str], timeout: float) -> dict[str, str]:
    """Cancel every job not final yet, then wait (up to `timeout`) until all are final: each one's state."""
    import httpx

    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=60) as http:
        for job_id in job_ids:
            if http.get(f"/api/v1/jobs/{job_id}").json().get("state") not in FINAL:
                http.post(f"/api/v1/jobs/{job_id}/cancel")
        while True:
            for job_id in job_ids:
                if states.get(job_id) not in FINAL:
                    answer = http.get(f"/api/v1/jobs/{job_id}")
                    ok = answer.status_code == 200
                    states[job_id] = answer.json().get("state", "?") if ok else f"HTTP {answer.status_code}"
            if all(s in FINAL for s in states.values()) or time.monotonic() > deadline:
                return states
            time.sleep(2)


def run_noisy_neighbour(
    *,
    clients: int,
    seconds: float,
    queue_limit: int,
    noisy_clients: int = 4,
    noisy_concurrency: int = 4,
    noisy_quota_bytes: int = 200_000,
    rounds: int = 4,
    upload_rows: int = 600,
    p99_bound: float = 2.0,
    drain_timeout: float = 600.0,
    database_url: str | None = None,
    with_ray: bool = True,
    ray_address: str | None = None,
) -> dict[str, Any]:
    """Start the service; run the quiet crowd with the noisy team in every second window; cancel and end
    every job; stop the service; return the report (its `verdict.pass` is the benchmark's judgement)."""
    with tempfile.TemporaryDirectory(prefix="smartune-noisy-") as tmp:
        root = Path(tmp)
        url = database_url or f"sqlite:///{root / 'data' / 'smartune.db'}"
        (root / "data").mkdir()
        admin, quiet, noisy_keys = _keys(url, clients, noisy_clients, noisy_quota_bytes)
        env = service_env(root, queue_limit)
        if ray_address:  # a running cluster of the user's (or the tests' session head)
            env["RAY_ADDRESS"] = ray_address
        if not with_ray:  # a closed port: no Ray answers; the declared node admits jobs, which stay queued
            env |= {"RAY_ADDRESS": f"http://127.0.0.1:{free_port()}", "SMARTUNE_LARGEST_NODE_CPUS": "2"}
        server = None
        try:
            server = serve(
                root / "data", database_url=url, ready_path="/readyz" if with_ray else "/healthz", env=env
            )
            noisy_plan = {"keys": noisy_keys, "concurrency": noisy_concurrency, "upload_rows": upload_rows}
            tally, noisy, first = _run(server.url, quiet, noisy_plan, seconds, rounds)
            noisy_jobs = noisy.pop("accepted_jobs")
            jobs = [*tally.accepted[quiet[0]], *noisy_jobs]
            states = _cancel_all(server.url, admin, jobs, drain_timeout)
        finally:
            if server is not None:
                server.stop()
    sides = _sides(tally, first, seconds, rounds)
    alone, beside = sides["alone"], sides["beside"]
    ratio = beside["p99_ms"] / alone["p99_ms"] if alone["p99_ms"] else float("inf")
    noisy_5xx = sum(
        n for counts in noisy["statuses"].values() for st, n in counts.items() if st.startswith("5")
    )
    verdict = {
        "p99_ratio": round(ratio, 2),
        "p99_bound": p99_bound,
        "p99_within_bound": ratio <= p99_bound,
        "quiet_errors": sides["errors"],
        "server_errors": len(tally.server_errors) + noisy_5xx,
        "all_final": all(s in FINAL for s in states.values()),
    }
    verdict["pass"] = bool(verdict["p99_within_bound"] and not verdict["quiet_errors"]
                           and not verdict["server_errors"] and verdict["all_final"])  # fmt: skip
    return {
        "scenario": "noisy neighbour",
        "database": url.split(":", 1)[0].split("+", 1)[0],  # the dialect: sqlite, postgresql
        "ray": with_ray,
        "seconds_per_side": seconds,
        "rounds": rounds,
        "quiet_clients": clients,
        "noisy_clients": noisy_clients,
        "noisy_in_flight_per_key": noisy_concurrency,
        "queue_limit_per_team": queue_limit,
        "noisy_storage_quota_bytes": noisy_quota_bytes,
        "verdict": verdict,
        "quiet_alone": alone,
        "quiet_beside_noisy": beside,
        "quiet_first_errors": (tally.server_errors + tally.client_errors + tally.transport_errors)[:5],
        "noisy": {**noisy, "accepted_jobs": len(noisy_jobs)},
        "jobs": len(jobs),
        "final_states": dict(Counter(states.values())),
    }


def main(args: argparse.Namespace) -> int:
    report = [
        run_noisy_neighbour(
            clients=args.clients,
            seconds=args.seconds,
            queue_limit=args.queue_limit,
            noisy_clients=args.noisy_clients,
            noisy_concurrency=args.noisy_concurrency,
            noisy_quota_bytes=args.noisy_quota_bytes,
            rounds=args.rounds,
            p99_bound=args.p99_bound,
            drain_timeout=args.drain_timeout,
            database_url=None if url == "sqlite" else url,
            ray_address=args.ray_address,
        )
        for url in args.database_url or ["sqlite"]
    ]
    print(json.dumps(report, indent=2))  # noqa: T201
    return 0 if all(r["verdict"]["pass"] for r in report) else 1
