"""The event loop: arrivals and trial ends on a simulated clock, admission by the control plane's own code.

Each scheduling round (at most every `round_s` simulated seconds, as the engine's interval, and at an
arrival) builds what `service.engine.pool.load` builds from the job store, `QueuedJob`s with the footprint of
`service.engine.pool.concurrency` and `TeamState`s holding what their active jobs reserve, and calls
`service.engine.scheduler.plan`. An admitted job reserves its footprint until its last trial ends (as the service
counts it); its trials start, up to its concurrency, wherever `Cluster` can place them (Ray's part, at
once, on every event). `policy="fifo"` runs the same code with every job in one team at priority 0:
first come, first served. `release_tail=False` keeps a job's whole footprint reserved to its last trial,
as the service did before it counted finished trials (`service.engine.pool.left_to_run`).

Overheads of a real control plane and Ray cluster (research/pool_replay measures them; all 0 by default):
`start_delay_s` from admission until a job's trials may start (the Ray job's driver starting up; one
figure for every job, or a mapping from job id to that job's own, the mean of them for a job it lacks),
`trial_overhead_s` added to every trial's duration (a slot's turnover: the next trial starts that long
after the previous one ended), `end_delay_s` from a job's last trial ending until the job leaves the pool
(the driver finishing and the engine noticing; meanwhile the job reserves one trial, as the service does).
`ray_scorer=True` places trials as Ray does (`Cluster`), `node_fit=True` as the worker's best-fit hint does,
each asking `trial_cpus` of its node's `node_cpus`.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from research.pool_sim.cluster import Cluster, Where
from research.pool_sim.workload import Job, Team
from service.engine.pool import concurrency
from service.engine.scheduler import QueuedJob, Resources, TeamState, plan

Policy = Literal["fair", "fifo"]


@dataclass
class Active:
    job: Job
    footprint: float  # GPUs reserved
    pending: list[float]  # durations of trials not started, next last
    running: int = 0
    ready_at: float = 0.0  # its trials may start from then on (start_delay_s after admission)


@dataclass
class Trace:
    gpus: int
    waits: dict[str, float] = field(default_factory=dict)  # job id -> seconds queued before admission
    gpu_seconds: dict[int, float] = field(default_factory=dict)  # team id -> GPU-seconds of trials run
    window_s: float = 0.0  # fairness is measured over [0, window_s]: the week itself
    in_window: dict[int, float] = field(default_factory=dict)  # team id -> GPU-seconds run inside it
    busy_backlogged: float = 0.0  # GPU-seconds busy while work was waiting
    backlogged_s: float = 0.0  # seconds while work was waiting
    busy_total: float = 0.0
    decision_s: list[float] = field(default_factory=list)  # wall seconds of each plan() call
    queue_lengths: list[int] = field(default_factory=list)
    end: float = 0.0
    busy_series: list[tuple[float, float, int]] = field(default_factory=list)  # (t, busy GPUs, queued jobs)
    trials: list[tuple[str, float, float]] = field(default_factory=list)  # (job id, start s, duration s)
    finished: dict[str, float] = field(default_factory=dict)  # job id -> when it left the pool


def run(
    teams: list[Team],
    jobs: list[Job],
    *,
    nodes: int,
    gpus_per_node: int,
    policy: Policy = "fair",
    round_s: float = 2.0,
    max_jobs: int | None = None,
    sample_every: float = 600.0,
    release_tail: bool = True,
    window_s: float = 7 * 24 * 3600.0,
    start_delay_s: float | Mapping[str, float] = 0.0,
    trial_overhead_s: float = 0.0,
    end_delay_s: float = 0.0,
    ray_scorer: bool = False,
    node_fit: bool = False,
    node_cpus: float = 0.0,
    trial_cpus: float = 0.0,
) -> Trace:
    delays = start_delay_s if isinstance(start_delay_s, Mapping) else {}
    default_delay = (
        (sum(delays.values()) / len(delays) if delays else 0.0)
        if isinstance(start_delay_s, Mapping)
        else start_delay_s
    )

    def delay_of(job_id: str) -> float:
        return float(delays.get(job_id, default_delay))

    cluster = Cluster(nodes, gpus_per_node, ray_scorer=ray_scorer, node_fit=node_fit, node_cpus=node_cpus)
    capacity = Resources(0.0, float(cluster.gpus))
    trace = Trace(cluster.gpus, window_s=window_s)
    queued_rows: dict[str, QueuedJob] = {}  # a queued job's row never changes: built once
    arrivals = list(reversed(jobs))  # pop from the end: earliest first
    queued: dict[str, Job] = {}
    active: dict[str, Active] = {}
    order: list[str] = []  # admission order: Ray serves pending trials first come, first served
    ends: list[tuple[float, int, str, float, Where]] = []  # (time, seq, job id, gpus, where)
    wakes: list[tuple[float, str]] = []  # (time, job id): a job's trials may start, or it leaves the pool
    seq, now, last_round, busy, next_sample = 0, 0.0, -1e18, 0.0, 0.0
    dirty = False  # something changed since the last round: without a change a round decides the same

    def backlogged() -> bool:
        return bool(queued) or any(a.pending and a.running < a.job.max_concurrent for a in active.values())

    def advance(to: float) -> None:
        nonlocal now
        span = to - now
        if span > 0:
            trace.busy_total += busy * span
            if backlogged():
                trace.busy_backlogged += busy * span
                trace.backlogged_s += span
        now = to

    def start_trials() -> None:
        nonlocal seq, busy
        for job_id in order:
            a = active[job_id]
            while a.pending and a.ready_at <= now and a.running < a.footprint / a.job.gpus_per_trial - 1e-9:
                where = cluster.place(a.job.gpus_per_trial, trial_cpus)
                if where is None:
                    break
                duration = a.pending.pop() + trial_overhead_s
                trace.trials.append((job_id, now, duration))
                a.running += 1
                busy += a.job.gpus_per_trial
                seq += 1
                heapq.heappush(ends, (now + duration, seq, job_id, a.job.gpus_per_trial, where))
                team_id, g = a.job.team_id, a.job.gpus_per_trial
                trace.gpu_seconds[team_id] = trace.gpu_seconds.get(team_id, 0.0) + g * duration
                inside = max(0.0, min(now + duration, trace.window_s) - now)
                trace.in_window[team_id] = trace.in_window.get(team_id, 0.0) + g * inside

    def schedule() -> None:
        states = (
            {t.id: TeamState(t.id, t.name, weight=t.weight, max_jobs=max_jobs) for t in teams}
            if policy == "fair"
            else {0: TeamState(0, "all")}
        )
        reserved = 0.0
        for a in active.values():
            if release_tail:  # reserve only what the job can still run: its unfinished trials
                left = len(a.pending) + a.running
                a.footprint = a.job.gpus_per_trial * concurrency(
                    0.0, a.job.gpus_per_trial, a.job.max_concurrent, left, capacity
                )
            team = states[a.job.team_id if policy == "fair" else 0]
            team.gpus_in_use += a.footprint
            team.jobs_running += 1
            reserved += a.footprint
        batch = []
        for job in queued.values():
            n = concurrency(0.0, job.gpus_per_trial, job.max_concurrent, len(job.durations), capacity)
            batch.append(
                QueuedJob(
                    job.id,
                    job.team_id if policy == "fair" else 0,
                    job.priority if policy == "fair" else 0,
                    job.arrival,
                    0.0,
                    job.gpus_per_trial,
                    0.0,
                    job.gpus_per_trial * n,
                )  # fmt: skip
            )
        started = time.perf_counter()
        decided = plan(batch, states, Resources(0.0, max(capacity.gpus - reserved, 0.0)), capacity)
        trace.decision_s.append(time.perf_counter() - started)
        trace.queue_lengths.append(len(batch))
        footprints = {q.id: q.footprint_gpus for q in batch}
        for job_id in decided.admitted:
            job = queued.pop(job_id)
            queued_rows.pop(job_id, None)
            trace.waits[job_id] = now - job.arrival
            delay = delay_of(job_id)
            active[job_id] = Active(
                job, footprints[job_id], list(reversed(job.durations)), ready_at=now + delay
            )
            order.append(job_id)
            if delay > 0:
                heapq.heappush(wakes, (now + delay, job_id))

    def leave(job_id: str) -> None:
        nonlocal dirty
        dirty = True
        del active[job_id]
        order.remove(job_id)
        trace.finished[job_id] = now

    while arrivals or ends or queued or wakes:
        next_arrival = arrivals[-1].arrival if arrivals else float("inf")
        next_end = ends[0][0] if ends else float("inf")
        next_round = max(last_round + round_s, now) if queued and dirty else float("inf")
        to = min(next_arrival, next_end, next_round, wakes[0][0] if wakes else float("inf"))
        advance(to)
        while next_sample <= now:
            trace.busy_series.append((next_sample, busy, len(queued)))
            next_sample += sample_every
        while arrivals and arrivals[-1].arrival <= now:
            job = arrivals.pop()
            queued[job.id] = job
            dirty = True
        while ends and ends[0][0] <= now:
            _, _, job_id, gpus, where = heapq.heappop(ends)
            cluster.release(gpus, where, trial_cpus)
            busy -= gpus
            a = active[job_id]
            a.running -= 1
            dirty = dirty or release_tail
            if not a.pending and a.running == 0:
                if end_delay_s > 0:
                    heapq.heappush(wakes, (now + end_delay_s, job_id))
                else:
                    leave(job_id)
        while wakes and wakes[0][0] <= now:
            _, job_id = heapq.heappop(wakes)
            a = active[job_id]
            if not a.pending and a.running == 0 and a.ready_at <= now:
                leave(job_id)
        if queued and dirty and now - last_round >= round_s - 1e-9:
            schedule()
            last_round, dirty = now, False
        start_trials()
    trace.end = now
    return trace
