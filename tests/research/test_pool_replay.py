"""The replay's pieces without a cluster: the workload is deterministic and becomes valid specs, the
comparison's arithmetic, the simulation's overheads, and the sleeping driver's MLflow record as the service
reads it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from research.pool_replay import compare, sleep_sweep, workload
from research.pool_replay.real import JobTimes
from research.pool_sim.workload import Job, Team
from worker.contract.outcome import completed_trials
from worker.contract.spec import JobSpec


def test_the_workload_is_deterministic_and_offers_its_load() -> None:
    params = workload.Params(seed=3)
    teams, jobs = workload.draw(params)
    assert (teams, jobs) == workload.draw(params)
    assert jobs != workload.draw(workload.Params(seed=4))[1]
    assert len(jobs) == params.jobs and [t.weight for t in teams] == [2.0, 1.0, 1.0, 1.0]
    window = workload.window_s(jobs, params)
    assert sum(j.gpu_seconds for j in jobs) / (window * params.pool_gpus) == pytest.approx(params.load)
    assert all(0 <= j.arrival <= window + 0.1 for j in jobs)
    assert [j.arrival for j in jobs] == sorted(j.arrival for j in jobs)
    for job in jobs:
        assert len(set(job.durations)) == len(job.durations)  # equal cells would be deduplicated
        assert all(params.sleep_min_s <= s <= params.sleep_max_s for s in job.durations)
        assert 1 <= job.max_concurrent <= len(job.durations)


def test_a_job_becomes_a_valid_spec_whose_trials_sleep_its_durations_in_order() -> None:
    teams, jobs = workload.draw(workload.Params(seed=1, jobs=5))
    for job in jobs:
        doc = workload.spec(job, teams[job.team_id])
        spec = JobSpec.model_validate(doc)
        assert spec.resources.gpus == job.gpus_per_trial
        assert spec.limits.max_concurrent_trials == job.max_concurrent
        assert workload.trial_sleeps(doc) == list(job.durations)
        plan = sleep_sweep.sleep_plan(spec.trials())
        assert [p["sleep_s"] for p in plan] == list(job.durations)
        assert [p["index"] for p in plan] == list(range(len(plan)))


def test_percentiles_interpolate_and_relative_differences() -> None:
    assert compare.pct([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert compare.pct([0.0, 10.0], 0.95) == pytest.approx(9.5)
    assert compare.pct([], 0.5) is None
    assert compare.rel(11.0, 10.0) == pytest.approx(0.1)
    assert compare.rel(1.0, 0.0) is None and compare.rel(None, 1.0) is None


def _times(job_id: str, team: str, submitted: float, admitted: float, sleeps: list[tuple[float, float]],
           finished: float, gpus: float = 1.0) -> JobTimes:  # fmt: skip
    return JobTimes(job_id, team, gpus, submitted, admitted, min(s for s, _ in sleeps), finished, sleeps)


def test_overheads_are_read_from_admission_hand_overs_and_the_end() -> None:
    # One slot: trials sleep 10 s, each hand-over takes 2 s; the first starts 5 s after admission.
    record = _times("j", "a", 0.0, 1.0, [(6.0, 16.0), (18.0, 28.0), (30.0, 40.0)], finished=43.0)
    assert compare.turnovers(record, 1) == [2.0, 2.0]
    over = compare.overheads([record], [Job("j", 0, 0.0, 0, 1.0, 1, (10.0, 10.0, 10.0))])
    assert over["start_delay_s"] == 5.0 and over["trial_overhead_s"] == 2.0 and over["end_delay_s"] == 3.0


def test_summaries_count_waits_and_gpu_seconds_busy_under_backlog() -> None:
    first = _times("j1", "a", 0.0, 0.0, [(0.0, 10.0)], finished=10.0)
    second = _times("j2", "b", 0.0, 10.0, [(10.0, 20.0)], finished=20.0)  # queued behind j1 for 10 s
    summary = compare.summarise([first, second], gpus=2.0)
    assert summary["wait_admit_s"]["p50"] == 5.0 and summary["by_team"]["b"]["wait_admit_s"]["p50"] == 10.0
    assert summary["backlog_s"] == 10.0 and summary["utilisation_under_backlog"] == 0.5  # 1 of 2 GPUs busy
    assert summary["makespan_s"] == 20.0 and summary["gpu_seconds_by_team"] == {"a": 10.0, "b": 10.0}
    rows = compare.table(summary, summary)
    assert all(r["rel_diff"] in (0.0, None) for r in rows)
    assert compare.verdict(rows)["within"]


def test_the_simulation_models_start_trial_and_end_overheads() -> None:
    teams = [Team(0, "a", 1.0, 1.0)]
    jobs = [Job("j1", 0, 0.0, 0, 1.0, 1, (10.0, 10.0)), Job("j2", 0, 1.0, 0, 1.0, 1, (10.0,))]
    plain = {r.id: r for r in compare.simulated(teams, jobs, nodes=1, gpus_per_node=1, round_s=2.0)}
    assert plain["j1"].sleeps == [(0.0, 10.0), (10.0, 20.0)] and plain["j2"].admitted == 20.0
    over = {"start_delay_s": 5.0, "trial_overhead_s": 1.0, "end_delay_s": 4.0}
    slow = {r.id: r for r in compare.simulated(teams, jobs, nodes=1, gpus_per_node=1, round_s=2.0, over=over)}
    assert slow["j1"].sleeps == [(5.0, 15.0), (16.0, 26.0)]  # a hand-over of 1 s
    assert slow["j1"].finished == pytest.approx(26.0 + 4.0)  # end delay counted from the last sleep's end
    assert slow["j2"].admitted == pytest.approx(30.0) and slow["j2"].first_start == pytest.approx(35.0)
    own = {**over, "start_delay_by_job_s": {"j1": 2.0, "j2": 8.0}}  # each job's measured start delay
    each = {r.id: r for r in compare.simulated(teams, jobs, nodes=1, gpus_per_node=1, round_s=2.0, over=own,
                                               per_job_start=True)}  # fmt: skip
    assert each["j1"].first_start == pytest.approx(2.0)
    assert each["j2"].first_start == pytest.approx(each["j2"].admitted + 8.0)  # type: ignore[operator]


def test_the_sleeping_driver_records_trials_the_way_the_service_reads_them(mlflow_uri: str) -> None:
    from service.engine.tracking import MlflowTracker
    from worker.tune.tracking import TrackingTarget, ensure_experiment, open_parent

    client = TrackingTarget(mlflow_uri, "", "job-1").client()
    target = TrackingTarget(mlflow_uri, ensure_experiment(client, "smartune-team-a", None), "job-1")
    parent = open_parent(client, target, 1, "h" * 64, "{}", {"trials": "1"})
    recorder = sleep_sweep._recorder(target, parent, 1)
    trial = SimpleNamespace(trial_id="t_00000", config={"trial": {"index": 0, "max_train_samples": 45, "sleep_s": 4.5}},
                            last_result={"sleep_start": 100.0, "sleep_end": 104.5, "score": 1.0})  # fmt: skip
    recorder.on_trial_start(0, [trial], trial)
    running = MlflowTracker(mlflow_uri, "smartune-team-a").job_runs("job-1")
    assert [(t.trial_id, t.state) for t in running.trials] == [("t_00000", "RUNNING")]
    recorder.on_trial_complete(1, [trial], trial)
    done = MlflowTracker(mlflow_uri, "smartune-team-a").job_runs("job-1").trials[0]
    assert done.state == "TERMINATED" and done.params == {"max_train_samples": 45}
    assert done.metrics["sleep_start"] == 100.0 and done.metrics["sleep_end"] == 104.5
    summary = sleep_sweep.summary_of("job-1", recorder.finals, recorder.errors)
    assert completed_trials(summary) == 1 and summary["best"]["value"] == 1.0
    assert json.loads(json.dumps(summary)) == summary


def test_the_driver_refuses_a_missing_or_invalid_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SMARTUNE_JOB_SPEC", raising=False)
    assert sleep_sweep.main(["--job-id", "j"]) == 2
    monkeypatch.setenv("SMARTUNE_JOB_SPEC", json.dumps({"task": "nope"}))
    assert sleep_sweep.main(["--job-id", "j"]) == 2


def test_rays_scorer_places_a_trial_on_the_emptiest_node_and_fragments_whole_gpus() -> None:
    from research.pool_sim.cluster import Cluster

    best_fit, ray = Cluster(2, 2), Cluster(2, 2, ray_scorer=True, node_cpus=4.0)
    assert best_fit.place(1.0) == (0, (0,)) and best_fit.place(1.0) == (0, (1,))
    assert ray.place(1.0, 1.0) == (0, (0,)) and ray.place(1.0, 1.0) == (1, (0,))  # spread: the emptier node
    assert best_fit.place(2.0) is not None and ray.place(2.0, 1.0) is None  # no node keeps 2 GPUs free
    ray.release(1.0, (1, (0,)), 1.0)
    assert ray.place(2.0, 1.0) == (1, (0, 1))


def test_the_workers_best_fit_hint_fills_the_fullest_node_as_the_real_cluster_did() -> None:
    from research.pool_sim.cluster import Cluster

    hinted = Cluster(2, 2, node_fit=True, node_cpus=4.0)
    # four half-GPU trials on one node (bench.placement measured the same on a real two-node cluster)
    assert [hinted.place(0.5, 0.5)[0] for _ in range(4)] == [0, 0, 0, 0]  # type: ignore[index]
    assert hinted.place(2.0, 0.5) == (1, (0, 1))  # the other node stayed whole
    hinted.release(0.5, (0, (0,)), 0.5)
    assert hinted.place(0.5, 0.5) == (0, (0,))  # the freed half, not a fresh GPU
    assert hinted.place(0.5, 0.5) is None
