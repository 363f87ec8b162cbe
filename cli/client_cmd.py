"""`smartune submit | jobs | status | cancel | retry | logs`: the command line of the SDK (`smartune.Client`).

The server is `--url` ($SMARTUNE_URL, default http://127.0.0.1:8000). The API key comes from a file
(`--key-file`, or $SMARTUNE_API_KEY_FILE) or from $SMARTUNE_API_KEY, never from a command-line value: the
arguments of a process are visible to every user of the machine (`ps`, /proc/<pid>/cmdline). `--key` is
refused with a pointer to these. Errors from the server print its `detail` on one line. `--json` prints
one JSON document on stdout (the server's answer) instead of the human view.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO, TypeVar

from cli.completion_cmd import FILE, completes
from cli.exit_codes import ExitCode
from smartune import FINAL_STATES as FINAL
from smartune import Client, SmartuneError
from smartune.config import KEY_ENV, KEY_FILE_ENV, key_from_env
from smartune.config import read_key_file as _read_key_file
from smartune.specs import read_spec

T = TypeVar("T")

__all__ = ["FINAL", "ServerError", "api_key", "connect", "read_spec", "register"]


class ServerError(ValueError):
    """No key could be found, or the key file is unusable; the message says why."""


NO_KEY_FLAG = (
    "--key is not accepted: a key on the command line is visible to every user of this machine (ps); "
    f"set {KEY_ENV} or pass --key-file (a file holding the key). If you just typed a real key, revoke it"
)


def common(p: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    """The options every client command takes: the server, the key file, and `--json`."""
    p.add_argument(
        "--url", default=None, help="the smartune server ($SMARTUNE_URL, default http://127.0.0.1:8000)"
    )
    completes(
        p.add_argument(
            "--key-file",
            type=Path,
            default=None,
            help=f"a file holding the API key (${KEY_FILE_ENV}); else ${KEY_ENV} is used",
        ),
        FILE,
    )
    p.add_argument("--key", dest="key_flag", default=None, help=argparse.SUPPRESS)  # refused: see NO_KEY_FLAG
    if json_flag:
        p.add_argument("--json", action="store_true", help="print the server's answer as one JSON document")


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def read_key_file(path: Path) -> str:
    """The key in `path` (its first line, stripped); a warning if others may read the file."""
    try:
        return _read_key_file(path, _warn)
    except SmartuneError as err:
        raise ServerError(err.detail) from None


def refuse_key_flag(args: argparse.Namespace) -> None:
    if getattr(args, "key_flag", None) is not None:
        raise ServerError(NO_KEY_FLAG)


def api_key(args: argparse.Namespace) -> str:
    """The key: `--key-file`, else $SMARTUNE_API_KEY, else $SMARTUNE_API_KEY_FILE; never a flag's value."""
    refuse_key_flag(args)
    if getattr(args, "key_file", None) is not None:
        return read_key_file(args.key_file)
    try:
        key = key_from_env(_warn)
    except SmartuneError as err:
        raise ServerError(err.detail) from None
    if key is None:
        raise ServerError(f"no API key: set {KEY_ENV}, or pass --key-file (or set {KEY_FILE_ENV})")
    return key


def connect(args: argparse.Namespace) -> Client:
    """The SDK client for the server the arguments name (tests replace this function)."""
    refuse_key_flag(args)
    return Client(url=args.url, key=api_key(args))


def emit_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def show(args: argparse.Namespace, fetch: Callable[[Client], T], render: Callable[[T], None]) -> int:
    """Ask the server through the SDK, then print its answer: as one JSON document with `--json`, else
    as `render` lays it out."""
    with connect(args) as client:
        value = fetch(client)
    if args.json:
        emit_json(value)
    else:
        render(value)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("submit", help="submit a job spec (YAML or JSON) to the server")
    completes(p.add_argument("spec", type=Path, help="the job spec file"), FILE)
    p.add_argument(
        "--idempotency-key", default=None, help="resubmitting with the same key returns the same job"
    )
    p.add_argument(
        "--estimate",
        action="store_true",
        help="validate and print the plan (trials, examples, device-hours, wall time, budget); submit nothing",
    )
    common(p)
    p.set_defaults(handler=submit)

    p = sub.add_parser("jobs", help="list your team's jobs, newest first")
    p.add_argument("--state", action="append", default=None, help="only jobs in this state (repeatable)")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--offset", type=int, default=0)
    common(p)
    p.set_defaults(handler=jobs)

    p = sub.add_parser("status", help="a job's state and progress; --watch follows it to the end")
    p.add_argument("job_id")
    p.add_argument(
        "--watch",
        action="store_true",
        help="refresh until the job ends (exit 1 unless SUCCEEDED); not on a terminal, print only changes",
    )
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    common(p)
    p.set_defaults(handler=status)

    p = sub.add_parser("cancel", help="cancel a job (a running one is stopped, its MLflow runs KILLED)")
    p.add_argument("job_id")
    common(p)
    p.set_defaults(handler=cancel)

    p = sub.add_parser(
        "retry", help="queue a FAILED job again: its next attempt resumes from its checkpoints"
    )
    p.add_argument("job_id")
    common(p)
    p.set_defaults(handler=retry)

    p = sub.add_parser("logs", help="the sweep driver's output, from Ray")
    p.add_argument("job_id")
    p.add_argument("--attempt", type=int, default=None, help="default: the latest")
    p.add_argument("--tail", type=int, default=None, help="only the last N lines")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new output until the job ends")
    common(p, json_flag=False)  # plain text: the driver's own output
    p.set_defaults(handler=logs)


def submit(args: argparse.Namespace) -> int:
    spec = read_spec(args.spec)
    if args.estimate:
        from cli.estimate_view import render_estimate

        show(args, lambda client: client.estimate(spec), render_estimate)
        return 0
    return show(
        args, lambda client: client.submit_job(spec, idempotency_key=args.idempotency_key), _submitted
    )


def _submitted(job: dict[str, Any]) -> None:
    print(job["id"])
    note = " (the earlier submission with this idempotency key)" if job["replayed"] else ""
    print(f"{job['state']}: {job['n_trials']} trials, spec {job['spec_hash'][:12]}{note}", file=sys.stderr)
    if job["identical_jobs"]:
        print(f"same spec as: {', '.join(job['identical_jobs'])}", file=sys.stderr)


def jobs(args: argparse.Namespace) -> int:
    return show(
        args, lambda client: client.jobs_page(args.state, limit=args.limit, offset=args.offset),
        lambda page: _job_table(page, args.offset),
    )  # fmt: skip


def _job_table(page: dict[str, Any], offset: int) -> None:
    print(f"{'ID':<18} {'STATE':<10} {'TEAM':<12} {'TRIALS':>6} {'PRIO':>4}  {'CREATED':<19}  NAME")
    for j in page["data"]:
        created = j["created_at"][:19].replace("T", " ")
        print(
            f"{j['id']:<18} {j['state']:<10} {j['team']:<12} {j['n_trials']:>6} {j['priority']:>4}  {created}  {j['name'] or ''}"
        )
    shown = len(page["data"])
    if page["count"] > offset + shown:
        print(f"({shown} of {page['count']}; --offset {offset + shown} for more)", file=sys.stderr)


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
    elif job["state"] in ("DISPATCHED", "RUNNING") and not by_state and (node := _autoscaler_wait(job)):
        parts.append(f"- {node}")
    return "  ".join(parts)


def _autoscaler_wait(job: dict[str, Any]) -> str | None:
    """What a dispatched job none of whose trials has started waits for, when its dispatch said it: the
    node an autoscaler adds (service.engine.autoscaler writes "waiting for the autoscaler ...")."""
    dispatched = [t["reason"] for t in job.get("transitions", []) if t["to_state"] == "DISPATCHED"]
    at = dispatched[-1].find("waiting for the autoscaler") if dispatched else -1
    return dispatched[-1][at:] if at >= 0 else None


def _ending(job: dict[str, Any]) -> None:
    """The lines after a finished job's progress line: its attempt, MLflow link, message."""
    if job["state"] not in FINAL:
        return
    extra = [f"attempt {job['attempt']} ({job['submission_id']})"] if job["attempt"] else []
    extra += [f"MLflow: {job['mlflow_url']}"] if job["mlflow_url"] else []
    extra += [job["message"]] if job["message"] else []
    if job["state"] == "FAILED":
        extra.append(f"resume it from its checkpoints: smartune retry {job['id']}")
    for line in extra:
        print(f"  {line}")


def progress_lines(out: TextIO) -> Callable[[dict[str, Any]], None]:
    """A `Client.wait` progress callback printing `describe(job)` to `out`: every refresh on a terminal,
    only a line that differs from the last one elsewhere (a log or a pipe keeps one line per change)."""
    last: list[str] = []

    def progress(job: dict[str, Any]) -> None:
        line = describe(job)
        if out.isatty() or last != [line]:
            print(line, file=out, flush=True)
        last[:] = [line]

    return progress


def status(args: argparse.Namespace) -> int:
    out = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the one JSON document
    with connect(args) as client:
        if args.watch:
            job = client.wait(args.job_id, poll_s=args.interval, progress=progress_lines(out))
        else:
            job = client.job(args.job_id)
            if not args.json:
                print(describe(job))
    if args.json:
        emit_json(job)
    else:
        _ending(job)
    return ExitCode.OK if not args.watch or job["state"] == "SUCCEEDED" else ExitCode.JOB_NOT_SUCCEEDED


def cancel(args: argparse.Namespace) -> int:
    return show(
        args, lambda client: client.cancel(args.job_id), lambda job: print(f"{job['id']} {job['state']}")
    )


def retry(args: argparse.Namespace) -> int:
    return show(
        args, lambda client: client.retry(args.job_id), lambda job: print(f"{job['id']} {job['state']}")
    )


def logs(args: argparse.Namespace) -> int:
    tail = args.tail
    printed = ""
    with connect(args) as client:
        while True:
            text = client.logs(args.job_id, attempt=args.attempt, tail=tail)
            sys.stdout.write(text[len(printed) :] if text.startswith(printed) else text)
            sys.stdout.flush()
            printed = text
            if not args.follow or client.job(args.job_id)["state"] in FINAL:
                return 0
            tail = None
            time.sleep(2.0)
