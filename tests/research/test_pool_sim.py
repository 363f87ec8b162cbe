"""The simulated pool: placement as Ray places bundles, the fairness measure, and the event loop driving the
control plane's own scheduler (tiny hand-made workloads whose outcome is known)."""

from __future__ import annotations

import pytest

from research.pool_sim.cluster import Cluster
from research.pool_sim.measures import fair_shares, jain, summarise
from research.pool_sim.simulate import run
from research.pool_sim.workload import WEEK, Job, Team, week

HOUR = 3600.0


def test_fractions_pack_onto_one_gpu_and_whole_gpus_stay_on_one_node() -> None:
    cluster = Cluster(2, 2)
    a, b = cluster.place(0.5), cluster.place(0.5)
    assert a is not None and b is not None and a == b  # the second half goes where the first is
    assert cluster.place(2) is not None  # the other node, whole
    assert cluster.place(2) is None  # 1 whole GPU left on the first node
    assert cluster.place(1) is not None and cluster.place(0.5) is None
    cluster.release(0.5, a)
    assert cluster.place(0.5) == a


def test_fair_shares_fill_water_and_jain_reads_them() -> None:
    assert fair_shares(10, {1: 2, 2: 10, 3: 10}, {1: 1, 2: 1, 3: 2}) == pytest.approx(
        {1: 2, 2: 8 / 3, 3: 16 / 3}
    )
    assert jain([1.0, 1.0, 1.0]) == 1.0 and jain([3.0, 0.0, 0.0]) == pytest.approx(1 / 3)


def _jobs(team: int, n: int, *, at: float = 0.0, trials: int = 4, seconds: float = HOUR) -> list[Job]:
    return [Job(f"t{team}-{i}", team, at + i, 0, 1.0, 1, (seconds,) * trials) for i in range(n)]


def test_weighted_fair_share_gives_a_double_weight_team_twice_the_gpus_under_contention() -> None:
    teams = [Team(0, "heavy", 2.0, 1.0), Team(1, "light", 1.0, 1.0)]
    jobs = sorted(_jobs(0, 60) + _jobs(1, 60, at=0.5), key=lambda j: j.arrival)
    trace = run(teams, jobs, nodes=1, gpus_per_node=3, window_s=24 * HOUR)
    assert trace.in_window[0] / trace.in_window[1] == pytest.approx(2.0, rel=0.05)
    fifo = run(teams, jobs, nodes=1, gpus_per_node=3, policy="fifo", window_s=24 * HOUR)
    assert fifo.in_window[0] / fifo.in_window[1] == pytest.approx(1.0, rel=0.05)  # arrivals alternate
    summary = summarise(trace, teams, jobs)
    assert summary["utilisation_under_backlog"] == pytest.approx(1.0, abs=0.01)
    assert summary["jain_fairness"] > 0.99 and summarise(fifo, teams, jobs)["jain_fairness"] < 0.95


def test_a_job_in_its_last_wave_frees_what_it_no_longer_runs() -> None:
    """A: 3 trials of 1 h, 2 at a time, on 2 GPUs; B (1 trial) arrives just after. Reserving A's whole
    footprint to its end starts B after 2 h; releasing A's tail starts it after 1 h."""
    teams = [Team(0, "a", 1.0, 1.0)]
    jobs = [Job("a", 0, 0.0, 0, 1.0, 2, (HOUR, HOUR, HOUR)), Job("b", 0, 1.0, 0, 1.0, 1, (HOUR,))]
    held = run(teams, jobs, nodes=1, gpus_per_node=2, release_tail=False)
    freed = run(teams, jobs, nodes=1, gpus_per_node=2, release_tail=True)
    assert held.waits["b"] == pytest.approx(2 * HOUR, abs=5) and freed.waits["b"] == pytest.approx(
        HOUR, abs=5
    )


def test_the_week_offers_about_the_asked_load_from_twenty_teams() -> None:
    teams, jobs = week(64, load=0.9, seed=3)
    offered = sum(j.gpu_seconds for j in jobs) / (64 * WEEK)
    assert len(teams) == 20 and {t.weight for t in teams} == {1.0, 2.0}
    assert 0.6 < offered < 1.2 and all(0 <= j.arrival < WEEK for j in jobs)
    assert week(64, load=0.9, seed=3)[1] == jobs  # seeded
