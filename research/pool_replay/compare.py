"""The simulated path and the comparison: the real path's overheads measured, the same workload through
research/pool_sim's event loop, and the same measures of both.

Overheads, measured on the real path's records (means over jobs or trial hand-overs):
- start delay: a job's admission to its first trial's sleep (the Ray job's driver starts, Tune places it);
- trial overhead: a slot's turnover inside a job, the sleep start of its trial number c+j minus the j-th
  earliest sleep end of the job (c = the job's trials at once: the trial that takes over a freed slot);
- end delay: the job's last sleep end to its `finished_at` (the driver ends, the engine notices).
The simulation gets them as `start_delay_s`, `trial_overhead_s` (added to every trial: a simulated trial
lasts sleep + overhead) and `end_delay_s` less the trial overhead (its last trial already carries one).

Measures, the same function on both paths: waits from submission to admission and to the first trial's
sleep, p50/p95 per team and overall (linear interpolation between order statistics); utilisation under
backlog = GPU-seconds spent sleeping while some job was queued (submitted, not yet admitted) / (GPUs x that
time); makespan = first submission to the last sleep's end; GPU-seconds of sleep per team.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from research.pool_replay.real import JobTimes
from research.pool_sim import simulate
from research.pool_sim.workload import Job, Team

WAIT_KEYS = ("wait_admit_s", "wait_first_trial_s")


def pct(values: Iterable[float], q: float) -> float | None:
    """The q-quantile, linear between order statistics (numpy's default); None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def rel(sim: float | None, real: float | None) -> float | None:
    """(sim - real) / real; None where either is missing or the real value is 0."""
    if sim is None or real is None or real == 0:
        return None
    return (sim - real) / real


def turnovers(job: JobTimes, concurrent: int) -> list[float]:
    """Each hand-over of a slot inside the job: the next trial's sleep start minus the freed slot's end."""
    starts = sorted(s for s, _ in job.sleeps)
    ends = sorted(e for _, e in job.sleeps)
    return [starts[concurrent + j] - ends[j] for j in range(len(starts) - concurrent)]


def overheads(records: list[JobTimes], jobs: list[Job]) -> dict[str, Any]:
    by_id = {j.id: j for j in jobs}
    done = [r for r in records if r.state == "SUCCEEDED" and r.sleeps and r.admitted is not None]
    by_job = {
        r.id: r.first_start - r.admitted for r in done if r.first_start is not None and r.admitted is not None
    }
    starts = list(by_job.values())
    ends = [r.finished - max(e for _, e in r.sleeps) for r in done if r.finished is not None]
    hand = [g for r in done for g in turnovers(r, by_id[r.id].max_concurrent)]

    def mean(xs: list[float]) -> float:
        return statistics.fmean(xs) if xs else 0.0

    return {
        "start_delay_s": mean(starts),
        "trial_overhead_s": mean(hand),
        "end_delay_s": mean(ends),
        "start_delay_p50_p95_s": [pct(starts, 0.5), pct(starts, 0.95)],
        "trial_overhead_p50_p95_s": [pct(hand, 0.5), pct(hand, 0.95)],
        "end_delay_p50_p95_s": [pct(ends, 0.5), pct(ends, 0.95)],
        "samples": {"jobs": len(done), "hand_overs": len(hand)},
        "start_delay_by_job_s": by_job,  # each job's own: the simulation may take them one by one
    }


def simulated(
    teams: list[Team],
    jobs: list[Job],
    *,
    nodes: int,
    gpus_per_node: int,
    round_s: float,
    over: dict[str, Any] | None = None,
    node_cpus: float | None = None,
    node_fit: bool = False,
    per_job_start: bool = False,
) -> list[JobTimes]:
    """The jobs (arrivals = the real submissions, durations = the sleeps in the driver's order) through
    research/pool_sim, with the measured overheads when `over` is given, and trials placed node by node (each
    asking 1 CPU of `node_cpus`) when `node_cpus` is given: by Ray's scorer, or with `node_fit` by the
    worker's best-fit hint; weighted fair share, no job caps. `per_job_start` gives each job the start delay
    it had on the real path (in sample only: `over` must have been measured on these jobs)."""
    over = over or {}
    trial_over = float(over.get("trial_overhead_s", 0.0))
    trace = simulate.run(
        teams, sorted(jobs, key=lambda j: (j.arrival, j.id)), nodes=nodes, gpus_per_node=gpus_per_node,
        round_s=round_s, window_s=float("inf"), start_delay_s=over["start_delay_by_job_s"] if per_job_start else float(over.get("start_delay_s", 0.0)),
        trial_overhead_s=trial_over, end_delay_s=max(0.0, float(over.get("end_delay_s", 0.0)) - trial_over),
        ray_scorer=node_cpus is not None and not node_fit, node_fit=node_cpus is not None and node_fit,
        node_cpus=node_cpus or 0.0, trial_cpus=1.0 if node_cpus else 0.0,
    )  # fmt: skip
    starts: dict[str, list[float]] = {}
    for job_id, start, _ in trace.trials:
        starts.setdefault(job_id, []).append(start)
    names = {t.id: t.name for t in teams}
    out = []
    for job in jobs:
        begun = starts.get(job.id, [])
        sleeps = [(s, s + d) for s, d in zip(begun, job.durations, strict=False)]  # popped in order
        admitted = job.arrival + trace.waits[job.id] if job.id in trace.waits else None
        out.append(JobTimes(job.id, names[job.team_id], job.gpus_per_trial, job.arrival, admitted,
                            min(begun, default=None), trace.finished.get(job.id), sorted(sleeps)))  # fmt: skip
    return out


def _merged(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _overlap(span: tuple[float, float], intervals: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(span[1], e) - max(span[0], s)) for s, e in intervals)


def _waits(records: list[JobTimes]) -> dict[str, dict[str, float | None]]:
    admit = [r.admitted - r.submitted for r in records if r.admitted is not None]
    first = [r.first_start - r.submitted for r in records if r.first_start is not None]
    return {
        key: {"p50": pct(values, 0.5), "p95": pct(values, 0.95), "mean": statistics.fmean(values) if values else None}
        for key, values in (("wait_admit_s", admit), ("wait_first_trial_s", first))
    }  # fmt: skip


def summarise(records: list[JobTimes], gpus: float) -> dict[str, Any]:
    """The measures of one path (see the module's docstring)."""
    backlog = _merged((r.submitted, r.admitted) for r in records if r.admitted is not None)
    backlog_s = sum(e - s for s, e in backlog)
    busy = sum(r.gpus * _overlap(sl, backlog) for r in records for sl in r.sleeps)
    ends = [e for r in records for _, e in r.sleeps]
    teams = sorted({r.team for r in records})
    return {
        "jobs": len(records),
        "trials": sum(len(r.sleeps) for r in records),
        **_waits(records),
        "by_team": {
            t: {"jobs": sum(r.team == t for r in records), **_waits([r for r in records if r.team == t])}
            for t in teams
        },  # fmt: skip
        "utilisation_under_backlog": busy / (gpus * backlog_s) if backlog_s else None,
        "backlog_s": backlog_s,
        "makespan_s": max(ends, default=0.0) - min((r.submitted for r in records), default=0.0),
        "gpu_seconds_by_team": {
            t: sum(r.gpus * (e - s) for r in records if r.team == t for s, e in r.sleeps) for t in teams
        },  # fmt: skip
    }


def table(real: dict[str, Any], sim: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of (measure, real, simulated, relative difference), overall then per team."""
    rows = []

    def add(name: str, r: float | None, s: float | None) -> None:
        rows.append({"measure": name, "real": r, "sim": s, "rel_diff": rel(s, r)})

    for key in WAIT_KEYS:
        for q in ("p50", "p95"):
            add(f"{key} {q}", real[key][q], sim[key][q])
    for team in real["by_team"]:
        for key in WAIT_KEYS:
            add(f"{team} {key} p50", real["by_team"][team][key]["p50"], sim["by_team"][team][key]["p50"])
    add("utilisation_under_backlog", real["utilisation_under_backlog"], sim["utilisation_under_backlog"])
    add("makespan_s", real["makespan_s"], sim["makespan_s"])
    return rows


def verdict(rows: list[dict[str, Any]], tolerance: float = 0.10) -> dict[str, Any]:
    """Within `tolerance` on the overall wait percentiles (the goal); the per-team rows are reported."""
    overall = [r for r in rows if r["measure"].startswith(WAIT_KEYS)]
    worst = max((abs(r["rel_diff"]) for r in overall if r["rel_diff"] is not None), default=None)
    return {
        "tolerance": tolerance,
        "overall_wait_worst_rel_diff": worst,
        "within": worst is not None and worst <= tolerance,
        "rows_within": sum(1 for r in rows if r["rel_diff"] is not None and abs(r["rel_diff"]) <= tolerance),
        "rows": len(rows),
    }
