"""`smartune status` of a job dispatched to a pool that an autoscaler has yet to grow (issue 30): its line
says which node it waits for until a trial starts."""

from __future__ import annotations

from typing import Any

from cli.client_cmd import describe

WAIT = "waiting for the autoscaler to add a node with 1 GPU, 1 CPU (a node of type 1 GPU, 8 CPUs)"


def _job(state: str, by_state: dict[str, int], reason: str) -> dict[str, Any]:
    transitions = [
        {"to_state": "QUEUED", "reason": "submitted"},
        {"to_state": "DISPATCHED", "reason": reason},
    ]
    return {"id": "job-1", "state": state, "progress": {"by_state": by_state, "total": 1}, "trials": [],
            "best_value": None, "wait_reason": None, "transitions": transitions}  # fmt: skip


def test_a_dispatched_job_says_it_waits_for_the_autoscaler_until_a_trial_starts() -> None:
    reason = (
        f"admitted: priority 0, team a at 0 GPUs in use / weight 1; pool had 4 GPUs, 32 CPUs free; {WAIT}"
    )
    assert describe(_job("RUNNING", {}, reason)) == f"job-1 RUNNING  trials 0/1 done  - {WAIT}"
    assert WAIT not in describe(_job("RUNNING", {"RUNNING": 1}, reason))  # the node came
    assert describe(_job("RUNNING", {}, "admitted: ...")) == "job-1 RUNNING  trials 0/1 done"
