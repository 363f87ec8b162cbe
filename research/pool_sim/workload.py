"""The synthetic week: 20 teams submitting sweeps, drawn from one seeded distribution.

Teams: 20, fair-share weights 2 (4 teams) or 1 (16); each has an activity level drawn log-normally
(sigma 0.75), so a few teams submit most of the work, as in a real shared pool.
Arrivals: a Poisson process per team whose rate follows the working week: x2.0 on weekdays 09-18 h,
x0.6 on weekday nights, x0.3 at weekends, scaled so the week's offered GPU-hours are `load` times the
pool's capacity (0.9 by default: the working day's peak offers about twice the pool, so a backlog builds
by day and drains at night).
Jobs: trials = cells x seeds, 5 / 12 / 36 / 108 with probabilities .40 / .30 / .20 / .10; GPUs per trial
0.5 / 1 / 2 / 4 with .30 / .50 / .15 / .05; at most 4, 8 or 16 trials at once (uniform); priority 10 for
5% of jobs (deadlines), else 0.
Trial durations: epochs (3-10, uniform) x training examples (a GLUE task drawn by the tasks' use in the
paper: RTE, MRPC, CoLA, STS-B, SST-2, QNLI, MNLI at 1k examples or their full size) x the method's step
cost relative to vanilla (bench/results/step.json: vanilla 1, SMART ~3, R3F ~2) / a vanilla throughput of
BERT-base at 128 tokens on one GPU (THROUGHPUT, an assumption until a GPU calibrates it); half a GPU runs
at 0.6 of the speed; log-normal noise (sigma 0.2) per trial.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

HOUR = 3600.0
WEEK = 7 * 24 * HOUR
THROUGHPUT = 400.0  # vanilla training examples per second, BERT-base, 128 tokens, one GPU (assumed)
TASK_SIZES = {
    "rte": 2_490,
    "mrpc": 3_668,
    "cola": 8_551,
    "stsb": 5_749,
    "sst2": 67_349,
    "qnli": 104_743,
    "mnli": 392_702,
}
METHOD_COST = {"vanilla": 1.0, "smart": 3.06, "r3f": 1.95, "smart-breg-only": 1.23}  # bench/results/step.json
TRIALS = ((5, 0.40), (12, 0.30), (36, 0.20), (108, 0.10))
GPUS = ((0.5, 0.30), (1.0, 0.50), (2.0, 0.15), (4.0, 0.05))


@dataclass(frozen=True)
class Team:
    id: int
    name: str
    weight: float
    activity: float  # relative submission rate


@dataclass(frozen=True)
class Job:
    id: str
    team_id: int
    arrival: float  # seconds since the week began
    priority: int
    gpus_per_trial: float
    max_concurrent: int
    durations: tuple[float, ...]  # seconds, one per trial, in submission order

    @property
    def gpu_seconds(self) -> float:
        return self.gpus_per_trial * sum(self.durations)


def _pick(rng: random.Random, table: tuple[tuple[float, float], ...]) -> float:
    return rng.choices([v for v, _ in table], weights=[w for _, w in table])[0]


def diurnal(t: float) -> float:
    """The arrival-rate multiplier at `t` seconds into a week that starts on Monday 00:00."""
    day, hour = int(t // (24 * HOUR)), (t % (24 * HOUR)) / HOUR
    if day >= 5:
        return 0.3
    return 2.0 if 9 <= hour < 18 else 0.6


def teams(rng: random.Random, n: int = 20) -> list[Team]:
    return [Team(i, f"team-{i:02d}", 2.0 if i < 4 else 1.0, math.exp(rng.gauss(0.0, 0.75))) for i in range(n)]


def _trial_seconds(rng: random.Random, gpus: float, method: str, examples: int, epochs: int) -> float:
    speed = THROUGHPUT * (0.6 if gpus < 1 else min(gpus, 4) ** 0.9)  # data parallel: 90% scaling exponent
    return epochs * examples * METHOD_COST[method] / speed * math.exp(rng.gauss(0.0, 0.2))


def _job(rng: random.Random, job_id: str, team: Team, t: float) -> Job:
    n = int(_pick(rng, TRIALS))
    gpus = _pick(rng, GPUS)
    task = rng.choice(list(TASK_SIZES))
    examples = TASK_SIZES[task] if rng.random() < 0.5 else min(1_000, TASK_SIZES[task])
    method, epochs = rng.choice(list(METHOD_COST)), rng.randint(3, 10)
    durations = tuple(_trial_seconds(rng, gpus, method, examples, epochs) for _ in range(n))
    return Job(
        job_id, team.id, t, 10 if rng.random() < 0.05 else 0, gpus, min(n, rng.choice((4, 8, 16))), durations
    )


def week(
    pool_gpus: float, *, load: float = 0.9, seed: int = 0, n_teams: int = 20
) -> tuple[list[Team], list[Job]]:
    """The teams and their jobs over one week, offering about `load` x the pool's GPU-seconds."""
    rng = random.Random(seed)
    roster = teams(rng, n_teams)
    shape_rng = random.Random(seed + 1)  # the mean job size, from draws that do not disturb the week's
    mean_gpu_s = sum(_job(shape_rng, "x", roster[0], 0.0).gpu_seconds for _ in range(4000)) / 4000
    mean_diurnal = sum(diurnal(h * HOUR) for h in range(7 * 24)) / (7 * 24)
    jobs_per_second = load * pool_gpus / mean_gpu_s / mean_diurnal  # at a multiplier of 1
    total_activity = sum(team.activity for team in roster)
    jobs: list[Job] = []
    for team in roster:
        peak = 2.0 * jobs_per_second * team.activity / total_activity  # thinning against the peak multiplier
        t = 0.0
        while True:
            t += rng.expovariate(peak)
            if t >= WEEK:
                break
            if rng.random() < diurnal(t) / 2.0:
                jobs.append(_job(rng, f"j{len(jobs):06d}", team, t))
    return roster, sorted(jobs, key=lambda j: (j.arrival, j.id))
