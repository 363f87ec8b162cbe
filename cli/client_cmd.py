"""`smartune submit | jobs | status | cancel | logs`: the HTTP client of a running `smartune serve`.

The server is `--url` ($SMARTUNE_URL, default http://127.0.0.1:8000) and the key `--key`
($SMARTUNE_API_KEY). Errors from the server print its `detail` (and the field at fault) on one line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


class ServerError(ValueError):
    """The server refused the request (or could not be reached); the message says why."""


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--url", default=None, help="the smartune server ($SMARTUNE_URL, default http://127.0.0.1:8000)"
    )
    p.add_argument("--key", default=None, help="an API key ($SMARTUNE_API_KEY)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("submit", help="submit a job spec (YAML or JSON) to the server")
    p.add_argument("spec", type=Path, help="the job spec file")
    p.add_argument(
        "--idempotency-key", default=None, help="resubmitting with the same key returns the same job"
    )
    p.add_argument("--json", action="store_true", help="print the server's answer as JSON")
    _common(p)
    p.set_defaults(handler=submit)

    p = sub.add_parser("jobs", help="list your team's jobs, newest first")
    p.add_argument("--state", action="append", default=None, help="only jobs in this state (repeatable)")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--json", action="store_true")
    _common(p)
    p.set_defaults(handler=jobs)

    p = sub.add_parser("status", help="a job's state and progress; --watch follows it to the end")
    p.add_argument("job_id")
    p.add_argument(
        "--watch", action="store_true", help="refresh until the job ends (exit 1 unless SUCCEEDED)"
    )
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    p.add_argument("--json", action="store_true")
    _common(p)
    p.set_defaults(handler=status)

    p = sub.add_parser("cancel", help="cancel a job (a running one is stopped, its MLflow runs KILLED)")
    p.add_argument("job_id")
    _common(p)
    p.set_defaults(handler=cancel)

    p = sub.add_parser("logs", help="the sweep driver's output, from Ray")
    p.add_argument("job_id")
    p.add_argument("--attempt", type=int, default=None, help="default: the latest")
    p.add_argument("--tail", type=int, default=None, help="only the last N lines")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new output until the job ends")
    _common(p)
    p.set_defaults(handler=logs)


def connect(args: argparse.Namespace) -> Any:
    """An httpx client for the server (tests replace this function)."""
    import httpx

    url = args.url or os.environ.get("SMARTUNE_URL") or "http://127.0.0.1:8000"
    key = args.key or os.environ.get("SMARTUNE_API_KEY")
    if not key:
        raise ServerError("no API key: pass --key or set SMARTUNE_API_KEY")
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    import httpx

    client = connect(args)
    try:
        response = client.request(method, f"/api/v1{path}", **kwargs)
    except httpx.TransportError as err:
        raise ServerError(
            f"cannot reach the server at {client.base_url} ({err}); is `smartune serve` running?"
        ) from None
    if response.status_code >= 400:
        try:
            body = response.json()
            detail = body.get("detail", response.text)
        except ValueError:
            detail = response.text
        raise ServerError(f"{response.status_code}: {detail}")
    return response


def read_spec(path: Path) -> Any:
    import yaml

    text = path.read_text()
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise ValueError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {err}") from None


def submit(args: argparse.Namespace) -> int:
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else {}
    job = call(args, "POST", "/jobs", json=read_spec(args.spec), headers=headers).json()
    if args.json:
        print(json.dumps(job, indent=2))
        return 0
    print(job["id"])
    note = " (the earlier submission with this idempotency key)" if job["replayed"] else ""
    print(f"{job['state']}: {job['n_trials']} trials, spec {job['spec_hash'][:12]}{note}", file=sys.stderr)
    if job["identical_jobs"]:
        print(f"same spec as: {', '.join(job['identical_jobs'])}", file=sys.stderr)
    return 0


def jobs(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"limit": args.limit, "offset": args.offset}
    if args.state:
        params["state"] = [s.upper() for s in args.state]
    page = call(args, "GET", "/jobs", params=params).json()
    if args.json:
        print(json.dumps(page, indent=2))
        return 0
    print(f"{'ID':<18} {'STATE':<10} {'TEAM':<12} {'TRIALS':>6} {'PRIO':>4}  {'CREATED':<19}  NAME")
    for j in page["data"]:
        created = j["created_at"][:19].replace("T", " ")
        print(
            f"{j['id']:<18} {j['state']:<10} {j['team']:<12} {j['n_trials']:>6} {j['priority']:>4}  {created}  {j['name'] or ''}"
        )
    shown = len(page["data"])
    if page["count"] > args.offset + shown:
        print(f"({shown} of {page['count']}; --offset {args.offset + shown} for more)", file=sys.stderr)
    return 0


def describe(job: dict[str, Any]) -> str:
    """One line of progress: state, trials by state, best value, why it waits."""
    by_state = job["progress"]["by_state"]
    done = sum(n for s, n in by_state.items() if s in ("TERMINATED", "ERROR", "STOPPED"))
    parts = [f"{job['id']} {job['state']}", f"trials {done}/{job['progress']['total']} done"]
    if by_state:
        parts.append("(" + ", ".join(f"{s} {n}" for s, n in sorted(by_state.items())) + ")")
    best = [t["best_score"] for t in job["trials"] if t["best_score"] is not None]
    if job["best_value"] is not None or best:
        parts.append(f"best {job['best_value'] if job['best_value'] is not None else max(best):.4f}")
    if job["state"] == "QUEUED" and job["wait_reason"]:
        parts.append(f"- waiting: {job['wait_reason']}")
    return "  ".join(parts)


def status(args: argparse.Namespace) -> int:
    while True:
        job = call(args, "GET", f"/jobs/{args.job_id}").json()
        if args.json and not args.watch:
            print(json.dumps(job, indent=2))
            return 0
        print(describe(job), flush=True)
        if not args.watch or job["state"] in FINAL:
            break
        time.sleep(args.interval)
    if job["state"] in FINAL:
        extra = [f"attempt {job['attempt']} ({job['submission_id']})"] if job["attempt"] else []
        extra += [f"MLflow: {job['mlflow_url']}"] if job["mlflow_url"] else []
        extra += [job["message"]] if job["message"] else []
        for line in extra:
            print(f"  {line}")
    return 0 if not args.watch or job["state"] == "SUCCEEDED" else 1


def cancel(args: argparse.Namespace) -> int:
    job = call(args, "POST", f"/jobs/{args.job_id}/cancel").json()
    print(f"{job['id']} {job['state']}")
    return 0


def logs(args: argparse.Namespace) -> int:
    params = {k: v for k, v in {"attempt": args.attempt, "tail": args.tail}.items() if v is not None}
    printed = ""
    while True:
        text = call(args, "GET", f"/jobs/{args.job_id}/logs", params=params).text
        sys.stdout.write(text[len(printed) :] if text.startswith(printed) else text)
        sys.stdout.flush()
        printed = text
        if not args.follow or call(args, "GET", f"/jobs/{args.job_id}").json()["state"] in FINAL:
            return 0
        params.pop("tail", None)
        time.sleep(2.0)
