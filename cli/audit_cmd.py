"""`smartune audit JOB_ID [--trial ID] [--tolerance T] [--wait]`: re-run a finished job's trials and compare.

Queues an audit through the SDK (`Client.audit`) and prints its id; with `--wait`, follows it to the end
and prints the verdict per trial with its reason (exit 0 only on PASS). `smartune audit JOB_ID --list`
lists the job's audits.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from cli import client_cmd
from cli.client_cmd import common, emit_json
from cli.exit_codes import ExitCode


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("audit", help="re-run a finished job's trials from their records and compare")
    p.add_argument("job_id")
    p.add_argument(
        "--trial", action="append", default=None, help="a Tune trial id (repeatable; default: the best)"
    )
    p.add_argument(
        "--tolerance", type=float, default=None, help="absolute, per metric (default: exact on CPU)"
    )
    p.add_argument("--wait", action="store_true", help="follow the audit to its report (exit 1 unless PASS)")
    p.add_argument("--list", action="store_true", help="list the job's audits instead")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between polls with --wait")
    common(p)
    p.set_defaults(handler=audit)


def audit(args: argparse.Namespace) -> int:
    with client_cmd.connect(args) as client:
        if args.list:
            listed = client.audits(args.job_id)
            if args.json:
                emit_json(listed)
            for item in [] if args.json else listed:
                print(f"{item['id']:<18} {item['state']:<10} {item['created_at'][:19].replace('T', ' ')}")
            return 0
        queued = client.audit(args.job_id, args.trial, args.tolerance)
        if not args.wait:
            emit_json(queued) if args.json else print(queued["id"])
            return 0
        print(f"audit {queued['id']} of {args.job_id}: {queued['state']}", file=sys.stderr)
        done = client.wait(queued["id"], poll_s=args.interval)
        if done["state"] != "SUCCEEDED":
            print(f"audit {done['id']} {done['state']}: {done['message'] or ''}", file=sys.stderr)
            return ExitCode.JOB_NOT_SUCCEEDED
        report = client.results(done["id"])
    if args.json:
        emit_json(report)
    else:
        _print_report(report)
    return ExitCode.OK if report["verdict"] == "PASS" else ExitCode.JOB_NOT_SUCCEEDED


def _print_report(report: dict[str, Any]) -> None:
    print(f"{report['verdict']}  (audit {report['job_id']} of {report['audit_of']})")
    for trial in report["trials"]:
        print(f"  {trial['run_id']}: {trial['verdict']} - {trial['reason']}")
        for row in [m for m in trial["metrics"] if not m["match"]][:10]:
            print(
                f"    epoch {row['epoch']} {row['metric']}: recorded {row['recorded']!r}, re-run {row['rerun']!r}"
            )
