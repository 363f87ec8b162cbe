"""`smartune migrate`: bring the job store's schema to the newest revision (a deployment's prestart step).

The team stack runs it once before the API starts (`SMARTUNE_MIGRATE_ON_START=false` there), so several
API replicas never race on a migration. `--wait S` retries the connection for S seconds first: the
database container may still be starting.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "migrate",
        help="migrate the job store (DATABASE_URL, else the data dir's SQLite) to the newest schema",
        description="Run the Alembic migrations of the job store; idempotent.",
    )
    p.add_argument(
        "--wait", type=float, default=0.0, metavar="SECONDS", help="retry connecting this long (default 0)"
    )
    p.add_argument("--revision", default="head", help="target revision (default: head)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import sqlalchemy.exc

    from service.config import Settings
    from service.store.db import connect, migrate, wait_until_reachable

    settings = Settings()
    if settings.database_url is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = connect(settings.sqlalchemy_url, timeout_s=settings.db_timeout_s)
    try:
        failures = wait_until_reachable(db, args.wait)
        if failures:
            print(f"smartune migrate: the database answered after {failures} failed attempt(s)")
        migrate(db, args.revision)
    except sqlalchemy.exc.OperationalError as err:  # still down after --wait: one line, the driver's reason
        reason = str(err.orig).strip().splitlines()[0] if err.orig else type(err).__name__
        print(f"smartune migrate: error: the database did not answer within {args.wait:g} s: {reason}")
        return 1
    finally:
        db.dispose()
    print(f"smartune migrate: job store at revision {args.revision}")
    return 0
