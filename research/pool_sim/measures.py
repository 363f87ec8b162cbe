"""What a simulated week shows: utilisation under backlog, waits per team, fairness, decision time.

Fairness is Jain's index of x_i = (GPU-hours team i got during the week) / (its weighted max-min fair share
of the GPU-hours the pool delivered that week, given what it asked for): the share is found by water
filling, so a team that asked for less than its weighted share is owed only what it asked. J = 1 when
every team got exactly its fair share; J = 1/n when one team got everything.
"""

from __future__ import annotations

from typing import Any

from research.pool_sim.simulate import Trace
from research.pool_sim.workload import Job, Team

HOUR = 3600.0


def fair_shares(capacity: float, demand: dict[int, float], weight: dict[int, float]) -> dict[int, float]:
    """Weighted max-min fair split of `capacity` among teams asking `demand` (water filling)."""
    share: dict[int, float] = {}
    left, open_ = capacity, {t for t, d in demand.items() if d > 0}
    while open_ and left > 1e-9:
        level = left / sum(weight[t] for t in open_)
        capped = {t for t in open_ if demand[t] - share.get(t, 0.0) <= weight[t] * level + 1e-9}
        if not capped:
            for t in open_:
                share[t] = share.get(t, 0.0) + weight[t] * level
            break
        for t in capped:
            left -= demand[t] - share.get(t, 0.0)
            share[t] = demand[t]
        open_ -= capped
    return share


def jain(values: list[float]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values)) if values else float("nan")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def summarise(trace: Trace, teams: list[Team], jobs: list[Job]) -> dict[str, Any]:
    weight = {t.id: t.weight for t in teams}
    demand: dict[int, float] = {}
    for job in jobs:
        if job.arrival < trace.window_s:
            demand[job.team_id] = demand.get(job.team_id, 0.0) + job.gpu_seconds
    got = {t: trace.in_window.get(t, 0.0) for t in demand}
    fair = fair_shares(sum(got.values()), demand, weight)
    ratios = [got[t] / fair[t] for t in demand if fair.get(t, 0) > 0]
    team_of = {j.id: j.team_id for j in jobs}
    waits: dict[int, list[float]] = {}
    for job_id, wait in trace.waits.items():
        waits.setdefault(team_of[job_id], []).append(wait / HOUR)
    every = [w for ws in waits.values() for w in ws]
    decisions = [d * 1e3 for d in trace.decision_s]
    return {
        "gpus": trace.gpus,
        "utilisation_under_backlog": trace.busy_backlogged / (trace.backlogged_s * trace.gpus)
        if trace.backlogged_s
        else None,
        "utilisation_week": sum(trace.in_window.values()) / (trace.window_s * trace.gpus),
        "backlogged_hours": trace.backlogged_s / HOUR,
        "last_trial_ends_hours": trace.end / HOUR,
        "jobs": len(jobs),
        "wait_hours": {"p50": _pct(every, 0.5), "p95": _pct(every, 0.95), "p99": _pct(every, 0.99)},
        "wait_hours_by_team": {
            next(t.name for t in teams if t.id == team): {
                "jobs": len(ws),
                "weight": weight[team],
                "p50": _pct(ws, 0.5),
                "p95": _pct(ws, 0.95),
                "p99": _pct(ws, 0.99),
            }
            for team, ws in sorted(waits.items())
        },  # fmt: skip
        "jain_fairness": jain(ratios),
        "fair_share_ratio_min_max": [min(ratios), max(ratios)] if ratios else None,
        "decision_ms": {
            "rounds": len(decisions),
            "p50": _pct(decisions, 0.5),
            "p99": _pct(decisions, 0.99),
            "max": max(decisions, default=float("nan")),
            "queue_max": max(trace.queue_lengths, default=0),
        },
    }
