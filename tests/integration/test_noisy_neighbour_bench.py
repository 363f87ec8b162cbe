"""`smartune bench load --noisy-neighbour` at a very small size: the plumbing, and the rule that a team at
its limits costs another team no error. No timing is asserted here: the benchmark judges latency (its
`verdict`) at full size, in `make bench`. Without Ray (a closed port, a declared node) the jobs stay queued,
so the queue limits answer within seconds and nothing trains."""

from __future__ import annotations

from bench.noisy_neighbour import run_noisy_neighbour

QUOTA = 60_000  # bytes: one upload of 300 rows (about 31 kB) fits, a second does not


def test_a_team_at_its_limits_costs_the_other_team_no_error() -> None:
    report = run_noisy_neighbour(
        clients=3, seconds=4, rounds=2, queue_limit=2, noisy_clients=2, noisy_concurrency=2,
        noisy_quota_bytes=QUOTA, upload_rows=300, with_ray=False,
    )  # fmt: skip
    verdict, alone, beside = report["verdict"], report["quiet_alone"], report["quiet_beside_noisy"]
    assert verdict["quiet_errors"] == 0 and alone["errors"] == beside["errors"] == 0, report[
        "quiet_first_errors"
    ]
    assert verdict["server_errors"] == 0 and verdict["all_final"], report["final_states"]
    for side in (alone, beside):  # both sides measured, in both rounds
        assert side["n"] > 0 and side["p99_ms"] > 0 and all(p > 0 for p in side["p99_ms_per_round"]), side
    assert verdict["p99_ratio"] == round(beside["p99_ms"] / alone["p99_ms"], 2)
    assert verdict["pass"] == (verdict["p99_ratio"] <= 2.0)  # the verdict is the bound; no error seen
    noisy = report["noisy"]["statuses"]
    assert (
        noisy["POST /datasets"].get("201", 0) >= 1 and noisy["POST /datasets"].get("409", 0) >= 1
    )  # its quota
    assert (
        noisy["POST /jobs"].get("201", 0) == 2 and noisy["POST /jobs"].get("429", 0) >= 1
    )  # its queue limit
    assert 0 < report["noisy"]["uploaded_bytes"] <= QUOTA and report["noisy"]["ready_ahead_s"] > 0
    assert report["final_states"] == {"CANCELLED": report["jobs"]}  # every job queued, then cancelled
