"""`smartune admin ...`: bootstrap teams and keys directly on the job store (no server needed).

`create-team NAME` and `create-key TEAM` print the new key alone on stdout (pipe it where it goes);
`create-team` refuses a data root that does not exist (`--force` for one mounted later) and warns about a
quota above what the pool has ever offered (cli/team_checks.py);
`mlflow-login TEAM` prints the team's MLflow login as `MLFLOW_TRACKING_USERNAME=...` and
`MLFLOW_TRACKING_PASSWORD=...` lines (with SMARTUNE_MLFLOW_TEAM_SECRET, as the API has it). The store is
`DATABASE_URL` when set, else the SQLite file in `--data-dir` ($SMARTUNE_DATA_DIR, ~/.smartune).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from cli import team_checks
from cli.completion_cmd import DIRECTORY, completes


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("admin", help="bootstrap teams and API keys on the job store directly")
    completes(
        p.add_argument(
            "--data-dir", default=None, help="the service's data directory (unless DATABASE_URL is set)"
        ),
        DIRECTORY,
    )
    cmds = p.add_subparsers(dest="admin", required=True, metavar="ACTION")

    team = cmds.add_parser("create-team", help="create a team and print its first API key")
    team.add_argument("name")
    team.add_argument("--gpus", type=float, default=None, help="GPU quota (default: the deployment's)")
    team.add_argument("--cpus", type=float, default=None, help="CPU quota (default: the deployment's)")
    team.add_argument("--max-jobs", type=int, default=None, help="concurrent jobs (default: the service's)")
    team.add_argument("--weight", type=float, default=1.0, help="fair-share weight")
    team.add_argument("--priority", type=int, default=0, help="default priority of its jobs")
    team.add_argument("--max-priority", type=int, default=0, help="the highest priority its jobs may ask")
    team.add_argument(
        "--data-root",
        action="append",
        default=None,
        dest="data_roots",
        help="an absolute folder its local data and models may come from (repeat for several)",
    )
    _budget_flags(team)
    _storage_flags(team)
    team.add_argument(
        "--force", action="store_true", help="accept a --data-root that does not exist yet (mounted later)"
    )
    team.add_argument("--no-key", action="store_true", help="create no key")
    team.set_defaults(handler=create_team)

    budget = cmds.add_parser("set-budget", help="set a team's GPU-hour / CPU-hour budget (none: no limit)")
    budget.add_argument("name")
    _budget_flags(budget, default=argparse.SUPPRESS)  # a flag not given changes nothing
    budget.set_defaults(handler=set_budget)

    storage = cmds.add_parser(
        "set-storage",
        help="set a team's storage quota and checkpoint retention ('default': the deployment's)",
    )
    storage.add_argument("name")
    _storage_flags(storage, default=argparse.SUPPRESS)  # a flag not given changes nothing
    storage.set_defaults(handler=set_storage)

    key = cmds.add_parser(
        "create-key", help="create an API key for TEAM (or a team-less admin key) and print it"
    )
    key.add_argument("team", nargs="?", help="the team (omit with --admin for a team-less admin key)")
    key.add_argument("--admin", action="store_true", help="an admin key")
    key.add_argument("--name", default=None, help="what the key is for")
    key.set_defaults(handler=create_key)

    revoke = cmds.add_parser("revoke-key", help="revoke a key by its public id")
    revoke.add_argument("key_id")
    revoke.set_defaults(handler=revoke_key)

    login = cmds.add_parser(
        "mlflow-login",
        help="print a team's MLflow login (user and password, from SMARTUNE_MLFLOW_TEAM_SECRET)",
    )
    login.add_argument("team")
    login.set_defaults(handler=mlflow_login)

    teams = cmds.add_parser("list-teams", help="list the teams and their quotas")
    teams.add_argument("--json", action="store_true", help="print the teams as one JSON document")
    teams.set_defaults(handler=list_teams)


def _budget_flags(p: argparse.ArgumentParser, default: Any = None) -> None:
    limit = lambda v: None if v == "none" else float(v)  # noqa: E731
    p.add_argument("--gpu-hours", type=limit, default=default, help="GPU-hours per period ('none': no limit)")
    p.add_argument("--cpu-hours", type=limit, default=default, help="CPU-hours per period ('none': no limit)")
    p.add_argument("--budget-days", type=limit, default=default,
                   help="the budgets' rolling window in days (default: SMARTUNE_BUDGET_PERIOD_DAYS, 30)")  # fmt: skip


def size_bytes(value: str) -> int | None:
    """`500MB`, `2GB`, `1.5GiB`, `1048576` (bytes) -> bytes; `default` -> None (the deployment's quota)."""
    if value.strip().lower() == "default":
        return None
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]i?)?b?\s*", value, re.IGNORECASE)
    if not found:
        raise argparse.ArgumentTypeError(f"{value!r}: a size (500MB, 2GB, 1.5GiB, or bytes) or 'default'")
    return int(float(found[1]) * UNITS[(found[2] or "").lower()])


UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "ki": 2**10, "mi": 2**20, "gi": 2**30,
         "ti": 2**40}  # fmt: skip


def _storage_flags(p: argparse.ArgumentParser, default: Any = None) -> None:
    days = lambda v: None if v == "default" else float(v)  # noqa: E731
    p.add_argument("--storage-quota", type=size_bytes, default=default,
                   help="datasets + checkpoints + MLflow artifacts: 500GB, 2TiB, ... ('default': "
                        "SMARTUNE_DEFAULT_STORAGE_QUOTA_GB)")  # fmt: skip
    p.add_argument("--retention-days", type=days, default=default,
                   help="days a finished job keeps its kept checkpoints ('default': "
                        "SMARTUNE_CHECKPOINT_RETENTION_DAYS, 14)")  # fmt: skip


def _settings(args: argparse.Namespace) -> Any:
    from service.config import Settings

    return Settings(**({"data_dir": args.data_dir} if args.data_dir else {}))


def _store(args: argparse.Namespace) -> Any:
    from service.store.db import connect, migrate

    settings = _settings(args)
    db = connect(settings.sqlalchemy_url)
    migrate(db)
    return db


def create_team(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from service.schemas import TeamCreate
    from service.store import crud

    try:
        team_in = TeamCreate(
            name=args.name,
            gpu_quota=args.gpus,
            cpu_quota=args.cpus,
            max_concurrent_jobs=args.max_jobs,
            weight=args.weight,
            default_priority=args.priority,
            max_priority=max(args.max_priority, args.priority),
            data_roots=args.data_roots,
            gpu_hours_budget=args.gpu_hours,
            cpu_hours_budget=args.cpu_hours,
            budget_period_days=args.budget_days,
            storage_quota_bytes=args.storage_quota,
            checkpoint_retention_days=args.retention_days,
        )
    except ValidationError as err:
        raise ValueError(f"invalid team: {err.errors()[0]['loc'][0]}: {err.errors()[0]['msg']}") from None
    warnings = team_checks.check_roots(team_in.data_roots, force=args.force)
    warnings += team_checks.check_quotas(args.gpus, args.cpus, _settings(args))
    db = _store(args)
    with db.write_sessions() as session:
        if crud.get_team(session=session, name=args.name) is not None:
            raise ValueError(f"team {args.name!r} exists already")
        team = crud.create_team(session=session, team_in=team_in)
        key = None if args.no_key else crud.create_api_key(session=session, team=team, name="first key")[1]
        session.commit()
    if key:
        print(key)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"created team {args.name!r}", file=sys.stderr)
    return 0


def set_budget(args: argparse.Namespace) -> int:
    """Only the flags given change: `--gpu-hours none` removes that budget."""
    flags = {
        "gpu_hours_budget": "gpu_hours",
        "cpu_hours_budget": "cpu_hours",
        "budget_period_days": "budget_days",
    }
    given = {field: getattr(args, flag) for field, flag in flags.items() if hasattr(args, flag)}
    if not given:
        raise ValueError("name at least one of --gpu-hours, --cpu-hours, --budget-days")
    _update(args, given, "budget")
    print(f"budget of {args.name!r}: " + ", ".join(f"{k}={v}" for k, v in given.items()), file=sys.stderr)
    return 0


def set_storage(args: argparse.Namespace) -> int:
    """Only the flags given change: `--storage-quota default` returns to the deployment's quota."""
    flags = {"storage_quota_bytes": "storage_quota", "checkpoint_retention_days": "retention_days"}
    given = {field: getattr(args, flag) for field, flag in flags.items() if hasattr(args, flag)}
    if not given:
        raise ValueError("name at least one of --storage-quota, --retention-days")
    _update(args, given, "storage")
    print(f"storage of {args.name!r}: " + ", ".join(f"{k}={v}" for k, v in given.items()), file=sys.stderr)
    return 0


def _update(args: argparse.Namespace, given: dict[str, Any], what: str) -> None:
    """Apply `given` (TeamUpdate's fields) to the team `args.name`; ValueError naming the field."""
    from pydantic import ValidationError

    from service.schemas import TeamUpdate
    from service.store import crud

    try:
        team_in = TeamUpdate.model_validate(given)
    except ValidationError as err:
        raise ValueError(f"invalid {what}: {err.errors()[0]['loc'][0]}: {err.errors()[0]['msg']}") from None
    db = _store(args)
    with db.write_sessions() as session:
        team = crud.get_team(session=session, name=args.name)
        if team is None:
            raise ValueError(f"no team {args.name!r}")
        crud.update_team(session=session, team=team, team_in=team_in)
        session.commit()


def create_key(args: argparse.Namespace) -> int:
    from service.store import crud

    if args.team is None and not args.admin:
        raise ValueError("name a TEAM, or pass --admin for a team-less admin key")
    db = _store(args)
    with db.write_sessions() as session:
        team = crud.get_team(session=session, name=args.team) if args.team else None
        if args.team and team is None:
            raise ValueError(f"no team {args.team!r}")
        _row, key = crud.create_api_key(session=session, team=team, is_admin=args.admin, name=args.name)
        session.commit()
    print(key)
    return 0


def revoke_key(args: argparse.Namespace) -> int:
    from service.store import crud

    db = _store(args)
    with db.write_sessions() as session:
        row = crud.get_api_key(session=session, key_id=args.key_id)
        if row is None:
            raise ValueError(f"no key {args.key_id!r}")
        crud.revoke_api_key(session=session, key=row)
        session.commit()
    print(f"revoked {args.key_id}", file=sys.stderr)
    return 0


def mlflow_login(args: argparse.Namespace) -> int:
    """The team's MLflow user and password as two shell assignments (hand them to the team: its MLflow UI
    login, and what its own scripts export); derived from the deployment's secret, never stored."""
    from service.config import Settings
    from service.store import crud

    login = Settings(**({"data_dir": args.data_dir} if args.data_dir else {})).team_mlflow_login(args.team)
    if login is None:
        raise ValueError("SMARTUNE_MLFLOW_TEAM_SECRET is unset: this deployment has no MLflow users per team")
    with _store(args).sessions() as session:
        if crud.get_team(session=session, name=args.team) is None:
            raise ValueError(f"no team {args.team!r}")
    print(f"MLFLOW_TRACKING_USERNAME={login[0]}")
    print(f"MLFLOW_TRACKING_PASSWORD={login[1]}")
    return 0


def list_teams(args: argparse.Namespace) -> int:
    from service.store import crud

    db = _store(args)
    with db.sessions() as session:
        if args.json:
            from service.schemas import TeamPublic

            rows = [
                TeamPublic.model_validate(t).model_dump(mode="json") for t in crud.list_teams(session=session)
            ]
            print(json.dumps(rows, indent=2))
            return 0
        for t in crud.list_teams(session=session):
            gpus = "default" if t.gpu_quota is None else f"{t.gpu_quota:g}"
            cpus = "default" if t.cpu_quota is None else f"{t.cpu_quota:g}"
            jobs = "default" if t.max_concurrent_jobs is None else str(t.max_concurrent_jobs)
            roots = ",".join(t.data_roots or []) or "-"
            disk = "default" if t.storage_quota_bytes is None else str(t.storage_quota_bytes)
            print(
                f"{t.name}\tgpus={gpus}\tcpus={cpus}\tjobs={jobs}\tweight={t.weight:g}"
                f"\tpriority={t.default_priority}\tmax_priority={t.max_priority}\troots={roots}"
                f"\tstorage_bytes={disk}"
            )
    return 0
