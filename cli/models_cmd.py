"""`smartune models [--team TEAM]`: the team's registered models, one per task (`Client.models`).

One line per model: its name, task, latest version, the version the alias `best` names with its dev score
and metric, and that version's job. `--json` prints the server's answer.

    NAME                       TASK      LATEST  BEST  SCORE   METRIC    JOB
    smartune-nlp-rte           rte            3     2  0.7220  accuracy  job-6f1c0a9e2b
"""

from __future__ import annotations

import argparse
from typing import Any

from cli.client_cmd import common, show


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("models", help="your team's registered models: latest and best version of each task")
    p.add_argument(
        "--team", default=None, help="whose models (admin keys; a team's key lists its own team's)"
    )
    common(p)
    p.set_defaults(handler=list_models)


def _table(models: list[dict[str, Any]]) -> None:
    if not models:
        print("no registered models")
        return
    print(f"{'NAME':<32} {'TASK':<9} {'LATEST':>6} {'BEST':>5}  {'SCORE':<7} {'METRIC':<9} JOB")
    for m in models:
        score = "-" if m.get("best_score") is None else f"{m['best_score']:.4f}"
        print(f"{m['name']:<32} {m['task']:<9} {m.get('latest_version') or '-':>6} "
              f"{m.get('best_version') or '-':>5}  {score:<7} {m.get('metric') or '-':<9} "
              f"{m.get('best_job_id') or '-'}")  # fmt: skip


def list_models(args: argparse.Namespace) -> int:
    return show(args, lambda client: client.models(team=args.team), _table)
