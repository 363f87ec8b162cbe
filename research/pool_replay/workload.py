"""The replay's short workload: a few teams submitting small sweeps of sleeping trials over a few minutes.

Drawn from one seed, in the shape of research/pool_sim/workload.py scaled down from a week to minutes:
teams with fair-share weights 2, 1, 1, ... and a log-normal activity (sigma 0.5); arrivals uniform (a Poisson
process given its count) over a window sized so the jobs offer `load` x the pool's GPU-seconds of it
(above 1: a backlog builds, and drains after the last arrival); per job 2-6 trials, 0.5 / 1 / 2 GPUs per trial (.40 / .45 /
.15), at most 1-3 trials at once, and one sleep per trial drawn uniformly in [`sleep_min_s`,
`sleep_max_s`], in tenths of a second, all different within a job.

A job becomes a real job spec (`spec`): each trial's sleep travels as its `max_train_samples` grid value,
read by research/pool_replay/sleep_sweep.py as tenths of a second (the sweepable integer field the contract
accepts unchanged), so the service validates, queues and dispatches it like any sweep.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, replace
from typing import Any

from research.pool_sim.workload import Job, Team
from worker.contract.spec import JobSpec

TRIALS = (2, 3, 4, 5, 6)
GPUS = ((0.5, 0.40), (1.0, 0.45), (2.0, 0.15))
CONCURRENCY = (1, 2, 3)
DECI = 10  # a trial's `max_train_samples` is its sleep in tenths of a second


@dataclass(frozen=True)
class Params:
    seed: int = 0
    teams: int = 4
    jobs: int = 20
    load: float = 1.3  # offered GPU-seconds / the pool's over the arrival window (which follows from it)
    pool_gpus: float = 6.0
    sleep_min_s: float = 15.0
    sleep_max_s: float = 45.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pick(rng: random.Random, table: tuple[tuple[float, float], ...]) -> float:
    return rng.choices([v for v, _ in table], weights=[w for _, w in table])[0]


def _sleeps(rng: random.Random, n: int, low: float, high: float) -> tuple[float, ...]:
    """`n` sleeps in [low, high] seconds, in tenths, all different (the grid deduplicates equal cells)."""
    tenths: list[int] = []
    while len(tenths) < n:
        value = round(rng.uniform(low, high) * DECI)
        if value not in tenths:
            tenths.append(value)
    return tuple(t / DECI for t in tenths)


def window_s(jobs: list[Job], params: Params) -> float:
    """The arrival window: the span over which the jobs offer `load` x the pool's GPU-seconds."""
    return sum(j.gpu_seconds for j in jobs) / (params.load * params.pool_gpus)


def draw(params: Params) -> tuple[list[Team], list[Job]]:
    """The teams and their jobs, arrivals in seconds from the replay's start, sorted by arrival."""
    rng = random.Random(params.seed)
    teams = [
        Team(i, f"team-{chr(ord('a') + i)}", 2.0 if i == 0 else 1.0, math.exp(rng.gauss(0.0, 0.5)))
        for i in range(params.teams)
    ]
    owners = rng.choices(teams, weights=[t.activity for t in teams], k=params.jobs)
    jobs = []
    for i, team in enumerate(owners):
        n, gpus = rng.choice(TRIALS), _pick(rng, GPUS)
        sleeps = _sleeps(rng, n, params.sleep_min_s, params.sleep_max_s)
        jobs.append(Job(f"r{i:03d}", team.id, 0.0, 0, gpus, min(n, rng.choice(CONCURRENCY)), sleeps))
    span = window_s(jobs, params)
    arrivals = sorted(round(rng.uniform(0.0, span), 1) for _ in jobs)
    return teams, [replace(job, arrival=at) for job, at in zip(jobs, arrivals, strict=True)]


def spec(job: Job, team: Team) -> dict[str, Any]:
    """The job spec submitted for `job` over REST (JSON data)."""
    return {
        "name": f"replay-{job.id}-{team.name}",
        "task": "rte",
        "model": "tiny-random",
        "method": "vanilla",
        "search_space": {
            "axes": {
                "max_train_samples": {"type": "grid", "values": [round(s * DECI) for s in job.durations]}
            }
        },
        "seeds": [1],
        "resources": {"cpus": 1, "gpus": job.gpus_per_trial},
        "limits": {"max_concurrent_trials": job.max_concurrent, "max_retries": 0},
    }


def trial_sleeps(spec_doc: dict[str, Any]) -> list[float]:
    """Each trial's sleep in seconds, in the order the sweep driver hands its trials to Tune."""
    return [trial["max_train_samples"] / DECI for trial in JobSpec.model_validate(spec_doc).trials()]
