"""`smartune results | pool | queue | teams | keys`: read-only views of the server, through the SDK.

`teams` and `keys TEAM` need an admin key. Each prints a table, or with `--json` the server's answer as
one JSON document. Server and key options as in cli/client_cmd.py.
"""

from __future__ import annotations

import argparse
from typing import Any

from cli.client_cmd import common, show


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("results", help="a SUCCEEDED job's sweep summary: cells, mean/std, the best trial")
    p.add_argument("job_id")
    common(p)
    p.set_defaults(handler=results)

    p = sub.add_parser("pool", help="the pool's capacity, what is reserved and free, usage by team")
    common(p)
    p.set_defaults(handler=pool)

    p = sub.add_parser("queue", help="the queue in the scheduler's order, each job's reason for waiting")
    common(p)
    p.set_defaults(handler=queue)

    p = sub.add_parser("teams", help="the teams and their quotas (admin key)")
    common(p)
    p.set_defaults(handler=teams)

    p = sub.add_parser("keys", help="a team's API keys: ids, names, dates, never the keys (admin key)")
    p.add_argument("team")
    common(p)
    p.set_defaults(handler=keys)


def _num(value: float | None, missing: str = "-") -> str:
    return missing if value is None else f"{value:g}"


def _params(params: Any) -> str:
    if isinstance(params, dict):
        return ",".join(f"{k}={v}" for k, v in params.items()) or "-"
    return str(params)


def results(args: argparse.Namespace) -> int:
    return show(
        args, lambda client: client.results(args.job_id), lambda summary: _summary(summary, args.job_id)
    )


def pool(args: argparse.Namespace) -> int:
    return show(args, lambda client: client.pool(), _pool)


def queue(args: argparse.Namespace) -> int:
    return show(args, lambda client: client.queue(), _queue)


def teams(args: argparse.Namespace) -> int:
    return show(args, lambda client: client.teams(), _teams)


def keys(args: argparse.Namespace) -> int:
    return show(args, lambda client: client.team_keys(args.team), _keys)


def _summary(summary: dict[str, Any], job_id: str) -> None:
    states = ", ".join(f"{s} {n}" for s, n in sorted((summary.get("trials_by_state") or {}).items()))
    print(f"{summary.get('job_id', job_id)}: {summary.get('main_metric', 'score')}; trials {states or '-'}")
    best = summary.get("best")
    if best:
        print(
            f"best {best.get('value', 0):.4f}  {_params(best.get('params'))}  (trial {best.get('trial_id') or '-'}, run {best.get('run_id') or '-'})"
        )
    print(f"{'N':>3}  {'MEAN':>8}  {'STD':>8}  CELL")
    for cell in summary.get("cells") or []:
        mean, std = cell.get("mean"), cell.get("std")
        mean_s = "-" if mean is None else f"{mean:.4f}"
        std_s = "-" if std is None else f"{std:.4f}"
        print(f"{cell.get('n', 0):>3}  {mean_s:>8}  {std_s:>8}  {_params(cell.get('params'))}")
    for error in summary.get("errors") or []:
        print(f"error: trial {error.get('trial_id')} ({error.get('error_class')}): {error.get('error')}")
    tasks = summary.get("tasks") or {}
    if tasks:  # a multitask job: each task's best, and its own registered model
        print(f"{'TASK':<8}  {'BEST':>8}  {'STAGE':<8}  {'EPOCH':>5}  {'TRIAL':<12}  MODEL")
        for name, result in sorted(tasks.items()):
            value = result.get("value")
            print(f"{name:<8}  {'-' if value is None else f'{value:.4f}':>8}  {result.get('stage') or '-':<8}  "
                  f"{result.get('epoch') or '-':>5}  {result.get('trial_id') or '-':<12}  "
                  f"{_model(result.get('registered_model'))}")  # fmt: skip
    elif isinstance(summary.get("registered_models"), dict):  # a grid over several tasks: one model each
        for name, registered in sorted(summary["registered_models"].items()):
            print(f"model ({name}): {_model(registered)}")
    elif summary.get("registered_model"):
        print(f"model: {_model(summary['registered_model'])}")


def _model(registered: Any) -> str:
    """This job's version of the registered model, `models:/<name>/<version> (version N; best: version M)`,
    or why there is none."""
    if not isinstance(registered, dict):
        return "-"
    if registered.get("version") is None:
        return f"not registered: {registered.get('error') or '-'}"
    best = f"; best: version {registered['best_version']}" if registered.get("best_version") else ""
    return f"{registered.get('uri')} (version {registered['version']}{best})"


def _pool(view: dict[str, Any]) -> None:
    for name in ("capacity", "reserved", "free"):
        res = view.get(name)
        print(
            f"{name:<9} "
            + (f"cpus {res['cpus']:g}  gpus {res['gpus']:g}" if res else "unknown (Ray unreachable)")
        )
    print(f"{'TEAM':<16} {'GPUS':>10} {'CPUS':>10} {'JOBS':>6} {'QUEUED':>6} {'WEIGHT':>6} {'SHARE':>6}")
    for t in view["teams"]:
        gpus = f"{t['gpus_in_use']:g}/{_num(t['gpu_quota'], '*')}"
        cpus = f"{t['cpus_in_use']:g}/{_num(t['cpu_quota'], '*')}"
        jobs = f"{t['jobs_running']}/{t['max_concurrent_jobs']}"
        print(
            f"{t['team']:<16} {gpus:>10} {cpus:>10} {jobs:>6} {t['jobs_queued']:>6} {t['weight']:>6g} {t['share']:>6.2f}"
        )
    if others := view.get("others"):
        print(
            f"other teams: {others['teams']} ({others['gpus_in_use']:g} GPUs in use, "
            f"{others['jobs_running']} jobs running, {others['jobs_queued']} queued)"
        )


def _queue(entries: list[dict[str, Any]]) -> None:
    print(f"{'POS':>3}  {'JOB':<18} {'TEAM':<12} {'PRIO':>4} {'CPUS':>5} {'GPUS':>5}  {'QUEUED':<19}  REASON")
    for e in entries:
        queued = e["queued_at"][:19].replace("T", " ")
        print(
            f"{e['position']:>3}  {e['job_id'] or '(other team)':<18} {e['team'] or '-':<12} {e['priority']:>4} "
            f"{e['cpus']:>5g} {e['gpus']:>5g}  {queued:<19}  {e['reason'] or ''}"
        )


def _teams(rows: list[dict[str, Any]]) -> None:
    if not rows:
        print("no teams yet: `smartune admin create-team NAME` makes one and prints its first key")
    for t in rows:
        roots = ",".join(t["data_roots"] or []) or "-"
        print(
            f"{t['name']}\tgpus={_num(t['gpu_quota'], 'default')}\tcpus={_num(t['cpu_quota'], 'default')}"
            f"\tjobs={t['max_concurrent_jobs'] or 'default'}\tweight={t['weight']:g}"
            f"\tpriority={t['default_priority']}\tmax_priority={t['max_priority']}\troots={roots}"
            f"\tstorage={_storage(t.get('storage'))}"
        )


def _storage(disk: dict[str, Any] | None) -> str:
    """`used/quota` in bytes (`*`: no quota), or `-` from a server that does not report it."""
    if not disk:
        return "-"
    quota = disk["quota_bytes"]
    return f"{disk['used_bytes']}/{'*' if quota is None else quota}"


def _keys(rows: list[dict[str, Any]]) -> None:
    print(f"{'KEY ID':<12}  {'ADMIN':<5}  {'CREATED':<19}  {'REVOKED':<19}  NAME")
    for k in rows:
        created = k["created_at"][:19].replace("T", " ")
        revoked = (k["revoked_at"] or "-")[:19].replace("T", " ")
        print(
            f"{k['key_id']:<12}  {'yes' if k['is_admin'] else 'no':<5}  {created:<19}  {revoked:<19}  {k['name'] or ''}"
        )
