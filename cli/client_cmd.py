"""`smartune submit | jobs | status | cancel | logs`: the HTTP client of a running `smartune serve`.

The server is `--url` ($SMARTUNE_URL, default http://127.0.0.1:8000). The API key comes from a file
(`--key-file`, or $SMARTUNE_API_KEY_FILE) or from $SMARTUNE_API_KEY, never from a command-line value: the
arguments of a process are visible to every user of the machine (`ps`, /proc/<pid>/cmdline). `--key` is
refused with a pointer to these. Errors from the server print its `detail` on one line.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


class ServerError(ValueError):
    """The server refused the request (or could not be reached); the message says why."""


KEY_ENV, KEY_FILE_ENV = "SMARTUNE_API_KEY", "SMARTUNE_API_KEY_FILE"
NO_KEY_FLAG = (
    "--key is not accepted: a key on the command line is visible to every user of this machine (ps); "
    f"set {KEY_ENV} or pass --key-file (a file holding the key). If you just typed a real key, revoke it"
)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--url", default=None, help="the smartune server ($SMARTUNE_URL, default http://127.0.0.1:8000)"
    )
    p.add_argument(
        "--key-file",
        type=Path,
        default=None,
        help=f"a file holding the API key (${KEY_FILE_ENV}); else ${KEY_ENV} is used",
    )
    p.add_argument("--key", dest="key_flag", default=None, help=argparse.SUPPRESS)  # refused: see NO_KEY_FLAG


def read_key_file(path: Path) -> str:
    """The key in `path` (its first line, stripped); a warning if others may read the file."""
    try:
        mode = path.stat().st_mode
        text = path.read_text()
    except OSError as err:
        raise ServerError(f"cannot read the key file {path}: {err.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        print(f"warning: the key file {path} is readable by others; chmod 600 it", file=sys.stderr)
    key = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not key:
        raise ServerError(f"the key file {path} is empty")
    return key


def refuse_key_flag(args: argparse.Namespace) -> None:
    if getattr(args, "key_flag", None) is not None:
        raise ServerError(NO_KEY_FLAG)


def api_key(args: argparse.Namespace) -> str:
    """The key: `--key-file`, else $SMARTUNE_API_KEY, else $SMARTUNE_API_KEY_FILE; never a flag's value."""
    refuse_key_flag(args)
    if getattr(args, "key_file", None) is not None:
        return read_key_file(args.key_file)
    if key := os.environ.get(KEY_ENV, "").strip():
        return key
    if path := os.environ.get(KEY_FILE_ENV, "").strip():
        return read_key_file(Path(path))
    raise ServerError(f"no API key: set {KEY_ENV}, or pass --key-file (or set {KEY_FILE_ENV})")


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
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {api_key(args)}"}, timeout=30)


def call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    import httpx

    refuse_key_flag(args)
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


def _yaml_loader() -> Any:
    """PyYAML's safe loader, reading `1e-4` as the number YAML 1.2 says it is (YAML 1.1 wants `1.0e-4`
    and reads `1e-4` as a string, which the server, validating strictly, refuses for a number)."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    number = re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")
    Loader.add_implicit_resolver("tag:yaml.org,2002:float", number, list("-+0123456789"))
    return Loader


def read_spec(path: Path) -> Any:
    import yaml

    text = path.read_text()
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=_yaml_loader())
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
