"""Submit the reproduction campaign to a running smartune server and wait for it (resumable).

    python -m bench.reproduction.run grid --tasks cola,stsb            # vanilla lr x epochs, full and ASHA
    python -m bench.reproduction.run methods --tasks cola --lr 1e-4 --epochs 10
    python -m bench.reproduction.run methods --tasks cola             # lr/epochs chosen from the grid jobs

The server is $SMARTUNE_URL with $SMARTUNE_API_KEY (a team's key). Each job goes in with its name as the
Idempotency-Key: run the same command again after an interruption (of this script, or of the server and
its Ray head) and it waits on the jobs that exist instead of submitting them again; a job whose cells
all finished is never rerun. Progress: one bar per job, in finished trials.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from typing import Any

from tqdm.auto import tqdm

from bench.reproduction import plan
from smartune import Client

FINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


def specs(
    phase: str, tasks: Iterable[str], lr: float | None, epochs: int | None, client: Client
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for task in tasks:
        if phase == "grid":
            out += [plan.grid_spec(task, asha=False), plan.grid_spec(task, asha=True)]
            continue
        if lr is None or epochs is None:
            from bench.reproduction.collect import choose_from_server

            chosen = choose_from_server(client, plan.TASKS)
            lr, epochs = lr or chosen["learning_rate"], epochs or chosen["epochs"]
            print(f"grid choice: lr {lr:g}, {epochs} epochs ({chosen['why']})", flush=True)
        out += [plan.method_spec(task, m, learning_rate=lr, epochs=epochs) for m in plan.METHODS]
    return out


def submit_all(client: Client, documents: list[dict[str, Any]]) -> list[str]:
    """Find or submit each job. The key is the job's name; a job of that name that FAILED or was
    CANCELLED is submitted again under `<name>#<n>` (its finished trials then run again)."""
    existing: dict[str, list[dict[str, Any]]] = {}
    for job in client.jobs():
        existing.setdefault(job.get("name") or "", []).append(job)
    ids = []
    for doc in documents:
        earlier = existing.get(doc["name"], [])  # newest first
        failed = sum(job["state"] in ("FAILED", "CANCELLED") for job in earlier)
        if earlier and earlier[0]["state"] not in ("FAILED", "CANCELLED"):
            failed = len(earlier) - 1  # the newest is alive or done: find it again by its own key
        key = doc["name"] if failed == 0 else f"{doc['name']}#{failed}"
        answer = client.submit_job(doc, idempotency_key=key)
        seen = "exists" if answer.get("replayed") else "submitted"
        print(f"{doc['name']}: {answer['id']} ({seen}, {answer['state']})", flush=True)
        ids.append(str(answer["id"]))
    return ids


def wait_all(client: Client, ids: list[str], poll_s: float) -> dict[str, str]:
    """One bar per job in finished trials; returns job id -> final state."""
    bars: dict[str, tqdm] = {}
    ended: dict[str, str] = {}

    while len(ended) < len(ids):
        for job_id in ids:
            if job_id in ended:
                continue
            job = client.job(job_id)
            progress = job["progress"]
            total = int(progress["total"]) or 1
            done = sum(progress["by_state"].get(s, 0) for s in ("TERMINATED", "ERROR", "STOPPED"))
            bar = bars.setdefault(job_id, tqdm(total=total, desc=job["name"], unit="trial", leave=True))
            bar.total = total
            bar.n = done
            bar.set_postfix_str(job["state"])
            bar.refresh()
            if job["state"] in FINAL:
                ended[job_id] = job["state"]
                bar.close()
        time.sleep(poll_s)
    return ended


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reproduction.run", description=__doc__.split("\n")[0]
    )
    parser.add_argument("phase", choices=["grid", "methods"])
    parser.add_argument("--tasks", default=",".join(plan.TASKS), help="comma list (default: all five)")
    parser.add_argument(
        "--lr", type=float, help="methods: the learning rate (default: chosen from the grid jobs)"
    )
    parser.add_argument("--epochs", type=int, help="methods: the epochs (default: chosen from the grid jobs)")
    parser.add_argument("--no-wait", action="store_true", help="submit (or find) the jobs and return")
    parser.add_argument("--poll", type=float, default=30.0, help="seconds between polls")
    args = parser.parse_args(argv)
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = sorted(set(tasks) - set(plan.TASKS))
    if unknown:
        parser.error(f"--tasks: not in the campaign: {', '.join(unknown)}")
    with Client() as client:
        ids = submit_all(client, specs(args.phase, tasks, args.lr, args.epochs, client))
        if args.no_wait:
            return 0
        states = wait_all(client, ids, args.poll)
    failed = [job for job, state in states.items() if state != "SUCCEEDED"]
    for job in failed:
        print(f"job {job} ended {states[job]}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
