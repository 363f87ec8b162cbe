"""Prometheus metrics, one registry per app (create_app may run many times in one process: tests).

HTTP, from prometheus-fastapi-instrumentator's middleware, labelled by route TEMPLATE, never by raw path:
- `http_request_duration_seconds{handler, method}`: a latency histogram;
- `http_requests_total{handler, method, status}`: requests by exact status code.
`handler` is the route template (`/api/v1/jobs/{job_id}`); a path no route matches is `none`, and so is a
path only a trailing-slash redirect would match (the instrumentator would report that raw path, ids and
all). Methods other than the usual seven count as `OTHER`. Both keep the label sets bounded whatever
clients send.

The pool, read from the job store at scrape time by `PoolCollector` (two aggregate queries on the read
engine, bounded by the store's timeouts; PostgreSQL also gets a statement timeout):
- `smartune_up`: 1 when the store answered this scrape, else 0 (and nothing below);
- `smartune_metrics_scrape_errors_total`: scrapes whose read failed (the cause goes to the log);
- `smartune_jobs{state}`: jobs in each state (every state, zeros included);
- `smartune_queue_depth`: QUEUED jobs;
- `smartune_team_jobs{team, state}`: the same by team (every team and state);
- `smartune_team_gpus_reserved{team}`, `smartune_team_cpus_reserved{team}`: what the scheduler counts as
  held by the team's dispatched and running jobs (concurrent trials times each trial's resources);
- `smartune_pool_gpus`, `smartune_pool_cpus`: the pool's capacity as this replica last read it from Ray
  (absent until it has);
- `smartune_engine_leader`: 1 on the replica holding the engine lease.
Plus the client library's process, platform and GC collectors.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_fastapi_instrumentator import Instrumentator, metrics, routing
from sqlalchemy import and_, func, select, text
from starlette.requests import Request

from service.engine import pool
from service.engine.autoscaler import Autoscaler
from service.engine.scheduler import Resources
from service.store.db import Database
from service.store.models import ACTIVE_STATES, Job, JobState, Team

logger = logging.getLogger(__name__)

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
UNTEMPLATED = "none"


def bounded_handler(info: metrics.Info) -> str:
    """The instrumentator's handler label, unless it is a raw path. The instrumentator labels a path that
    matches no route, but would after its trailing-slash redirect, with the path itself
    (`/api/v1/jobs/job-1/`): a label per id. A label equal to the request's path is kept only when a route
    matches that path directly (a route without parameters), else it is `none`."""
    handler = info.modified_handler
    scope = info.request.scope
    if handler == UNTEMPLATED or handler != scope.get("path"):
        return handler  # a template (or `none`)
    without_redirects = Request(
        {**scope, "app": SimpleNamespace(routes=getattr(scope.get("app"), "routes", []))}
    )
    direct = routing.get_route_name(without_redirects, should_include_root_path=False)
    return handler if direct == handler else UNTEMPLATED


def _http_metrics(registry: CollectorRegistry) -> Callable[[metrics.Info], None]:
    latency = metrics.latency(should_include_status=False, buckets=LATENCY_BUCKETS, registry=registry)
    requests = metrics.requests(registry=registry)
    assert latency is not None and requests is not None  # a fresh registry has no duplicates

    def instrumentation(info: metrics.Info) -> None:
        info.modified_handler = bounded_handler(info)
        if info.method not in METHODS:
            info.method = "OTHER"
        latency(info)
        requests(info)

    return instrumentation


@dataclass(frozen=True)
class Snapshot:
    jobs: dict[tuple[str, str], int]  # (team, state) -> jobs
    reserved: dict[str, Resources]  # team -> (cpus, gpus) held by its dispatched and running jobs


def read_snapshot(db: Database, capacity: Resources | None, *, timeout_s: float) -> Snapshot:
    """Two aggregate reads: jobs by team and state, and every team's active jobs' resources."""
    with db.sessions() as session:
        if not db.is_sqlite:  # SQLite reads never wait (WAL); a PostgreSQL statement could
            session.execute(text(f"SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}"))
        counts = session.execute(
            select(Team.name, Job.state, func.count())
            .join(Team, Team.id == Job.team_id)
            .group_by(Team.name, Job.state)
        ).all()
        active = session.execute(
            select(
                Team.name,
                Job.id,
                Job.cpus_per_trial,
                Job.gpus_per_trial,
                Job.max_concurrent_trials,
                Job.n_trials,
            ).outerjoin(Job, and_(Job.team_id == Team.id, Job.state.in_(ACTIVE_STATES)))
        ).all()
        finished = pool.finished_trials(session)
    jobs = {(team, str(state)): int(n) for team, state, n in counts}
    reserved: dict[str, Resources] = {}
    for team, job_id, cpt, gpt, concurrent, n_trials in active:
        held = reserved.get(team, Resources(0.0, 0.0))
        if cpt is not None:  # a team without active jobs: one row of NULLs
            left = pool.left_to_run(n_trials, finished.get(job_id, 0))
            running = pool.concurrency(cpt, gpt, concurrent, left, capacity)
            held = Resources(held.cpus + cpt * running, held.gpus + gpt * running)
        reserved[team] = held
    return Snapshot(jobs=jobs, reserved=reserved)


class PoolCollector(Collector):
    """The pool's gauges, computed at each scrape from `state()` (the app's state: its db and engine)."""

    def __init__(self, state: Callable[[], Any], *, timeout_s: float) -> None:
        self.state, self.timeout_s = state, timeout_s
        self.errors = 0  # scrapes that could not read the store
        self._lock = threading.Lock()

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily("smartune_up", "1 when the job store answered this scrape, else 0")
        families: list[Metric] = []
        try:
            families = list(self._pool())
            up.add_metric([], 1.0)
        except Exception as err:  # a scrape never fails: it says the store is unreadable
            with self._lock:
                self.errors += 1
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            logger.warning("metrics: the job store could not be read: %s", first[:300])
            up.add_metric([], 0.0)
        failed = CounterMetricFamily(
            "smartune_metrics_scrape_errors", "scrapes that could not read the job store"
        )
        failed.add_metric([], float(self.errors))
        yield up
        yield failed
        yield from families

    def _pool(self) -> Iterator[Metric]:
        state = self.state()
        db: Database | None = getattr(state, "db", None)
        engine = getattr(state, "engine", None)
        if db is None or engine is None:
            raise RuntimeError("the app has not started")
        capacity: Resources | None = engine.capacity
        autoscaler = Autoscaler.of(engine.settings.autoscaled_node_types)  # trials at once: on its reach
        snapshot = read_snapshot(db, pool.reach(capacity, autoscaler), timeout_s=self.timeout_s)
        teams = sorted({team for team, _ in snapshot.jobs} | set(snapshot.reserved))
        states = [s.value for s in JobState]

        by_state = GaugeMetricFamily("smartune_jobs", "jobs in each state", labels=["state"])
        by_team = GaugeMetricFamily(
            "smartune_team_jobs", "jobs in each state, by team", labels=["team", "state"]
        )
        for s in states:
            by_state.add_metric([s], float(sum(n for (_, st), n in snapshot.jobs.items() if st == s)))
            for team in teams:
                by_team.add_metric([team, s], float(snapshot.jobs.get((team, s), 0)))
        yield by_state
        yield by_team
        queued = sum(n for (_, st), n in snapshot.jobs.items() if st == JobState.QUEUED)
        yield GaugeMetricFamily("smartune_queue_depth", "jobs waiting in the queue (QUEUED)", value=queued)

        gpus = GaugeMetricFamily(
            "smartune_team_gpus_reserved",
            "GPUs held by the team's dispatched and running jobs",
            labels=["team"],
        )
        cpus = GaugeMetricFamily(
            "smartune_team_cpus_reserved",
            "CPUs held by the team's dispatched and running jobs",
            labels=["team"],
        )
        for team in teams:
            held = snapshot.reserved.get(team, Resources(0.0, 0.0))
            gpus.add_metric([team], held.gpus)
            cpus.add_metric([team], held.cpus)
        yield gpus
        yield cpus

        if capacity is not None:
            yield GaugeMetricFamily(
                "smartune_pool_gpus", "GPUs in the pool, as last read from Ray", value=capacity.gpus
            )
            yield GaugeMetricFamily(
                "smartune_pool_cpus", "CPUs in the pool, as last read from Ray", value=capacity.cpus
            )
        leader = 1.0 if getattr(engine, "leading", False) else 0.0
        yield GaugeMetricFamily(
            "smartune_engine_leader", "1 on the replica holding the engine lease", value=leader
        )


@dataclass
class AppMetrics:
    registry: CollectorRegistry
    collector: PoolCollector


def install(app: FastAPI, *, timeout_s: float) -> AppMetrics:
    """A registry of the app's own (never the global one), its HTTP middleware and the pool's collector."""
    registry = CollectorRegistry()
    for make in (ProcessCollector, PlatformCollector, GCCollector):
        make(registry=registry)
    collector = PoolCollector(state=lambda: app.state, timeout_s=timeout_s)
    registry.register(collector)
    Instrumentator(
        should_group_status_codes=False,
        should_group_untemplated=True,
        registry=registry,
    ).add(_http_metrics(registry)).instrument(app)
    app.state.metrics = installed = AppMetrics(registry, collector)
    return installed
