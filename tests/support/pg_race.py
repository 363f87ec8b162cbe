"""Two writes to PostgreSQL made to overlap every time, for the tests of checks that must hold when requests
run side by side (a team's storage quota, its queue limit): a third connection holds a SHARE lock on the
table they insert into (reads pass, inserts wait) until every request waits on a lock, then lets them go."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg2


def waiting_backends(database: str, query_like: Sequence[str] = ()) -> int:
    """Backends of `database` waiting on a lock; only those whose query is ILIKE one of `query_like`, if
    given."""
    where = " OR ".join("query ILIKE %s" for _ in query_like)
    with psycopg2.connect(database) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT count(DISTINCT pid) FROM pg_locks JOIN pg_stat_activity USING (pid) "
                       "WHERE NOT granted AND datname = current_database()" + (f" AND ({where})" if where else ""),
                       tuple(query_like))  # fmt: skip
        return int(cursor.fetchone()[0])


def side_by_side(
    database: str, table: str, calls: Sequence[Callable[[], httpx.Response]], waiting: Callable[[], int]
) -> list[httpx.Response]:
    """Runs `calls` at once while `table` is SHARE-locked, until `waiting()` counts each of them waiting on
    a lock (within 60 s, and none answered before); then releases the lock and returns their answers."""
    holder = psycopg2.connect(database)
    try:
        with holder.cursor() as cursor:
            cursor.execute(f"LOCK TABLE {table} IN SHARE MODE")  # held until rollback
        with ThreadPoolExecutor(len(calls)) as pool:
            answers = [pool.submit(call) for call in calls]
            deadline = time.monotonic() + 60
            while waiting() < len(calls):
                assert time.monotonic() < deadline and not any(a.done() for a in answers), [
                    a.result().text for a in answers if a.done()
                ]
                time.sleep(0.2)
            holder.rollback()
            return [a.result() for a in answers]
    finally:
        holder.close()
