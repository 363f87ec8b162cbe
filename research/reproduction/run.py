"""Submit the reproduction campaign to a running smartune server and wait for it (resumable).

    python -m research.reproduction.run grid --tasks cola,stsb            # vanilla lr x epochs, full and ASHA
    python -m research.reproduction.run methods --tasks cola --lr 1e-4 --epochs 10
    python -m research.reproduction.run methods --tasks cola             # lr/epochs chosen from the grid jobs
    python -m research.reproduction.run methods --tasks sst2 --methods vanilla,smart --lr 5e-5 --epochs 10

The server is $SMARTUNE_URL with $SMARTUNE_API_KEY (a team's key); choosing from the grid reads the
server's MLflow store at $MLFLOW_TRACKING_URI. Each job goes in with its name as the Idempotency-Key: run
the same command again after an interruption (of this script, or of the server and its Ray head) and it
waits on the jobs that exist instead of submitting them again, so finished cells never run twice.
Progress: one bar per job, in finished trials.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Iterable
from typing import Any

from tqdm.auto import tqdm

from research.reproduction.plan import CAMPAIGN, TASKS, Campaign
from smartune import Client

FINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
ENDED_TRIALS = ("TERMINATED", "ERROR", "STOPPED")


def specs(
    campaign: Campaign,
    phase: str,
    tasks: Iterable[str],
    lr: float | None = None,
    epochs: int | None = None,
    *,
    client: Client | None = None,
    tracking_uri: str | None = None,
) -> list[dict[str, Any]]:
    """The phase's job specs; `methods` without lr and epochs chooses them from the grid jobs' results."""
    tasks = list(tasks)
    if phase == "grid":
        return [campaign.grid_spec(t, asha=asha) for t in tasks for asha in (False, True)]
    if lr is None or epochs is None:
        from research.reproduction.collect import choose, collect

        if client is None or not tracking_uri:
            raise SystemExit(
                "choosing lr and epochs reads the grid from MLflow: set MLFLOW_TRACKING_URI, or pass --lr and --epochs"
            )
        chosen = choose(collect(client, tracking_uri, campaign))
        lr, epochs = lr or chosen["learning_rate"], epochs or chosen["epochs"]
        print(
            f"grid choice: lr {lr:g}, {epochs} epochs, on {', '.join(chosen['tasks'])} ({chosen['why']})",
            flush=True,
        )
    return [
        campaign.method_spec(t, m, learning_rate=lr, epochs=epochs) for t in tasks for m in campaign.methods
    ]


def submit_all(client: Client, documents: list[dict[str, Any]]) -> list[str]:
    """Find or submit each job. The key is the job's name. The newest job of that name is found again;
    one that FAILED is retried (it resumes from its checkpoints: finished trials are not run again); one
    that was CANCELLED is submitted again under `<name>#<n>` (its trials then run again)."""
    existing: dict[str, list[dict[str, Any]]] = {}
    for job in client.jobs():
        existing.setdefault(job.get("name") or "", []).append(job)
    ids = []
    for doc in documents:
        earlier = existing.get(doc["name"], [])  # newest first; each under its own key, the first bare
        if earlier and earlier[0]["state"] == "FAILED":
            answer = client.retry(str(earlier[0]["id"]))
            print(f"{doc['name']}: {answer['id']} (retried, {answer['state']})", flush=True)
            ids.append(str(answer["id"]))
            continue
        n = len(earlier) if earlier and earlier[0]["state"] == "CANCELLED" else max(0, len(earlier) - 1)
        key = doc["name"] if n == 0 else f"{doc['name']}#{n}"
        answer = client.submit_job(doc, idempotency_key=key)
        seen = "exists" if answer.get("replayed") else "submitted"
        print(f"{doc['name']}: {answer['id']} ({seen}, {answer['state']})", flush=True)
        ids.append(str(answer["id"]))
    return ids


def wait_all(client: Client, ids: list[str], poll_s: float, *, bars: bool = True) -> dict[str, str]:
    """One bar per job in finished trials; returns job id -> final state."""
    shown: dict[str, tqdm] = {}
    ended: dict[str, str] = {}
    while True:
        for job_id in ids:
            if job_id in ended:
                continue
            job = client.job(job_id)
            if bars:
                bar = shown.setdefault(job_id, tqdm(total=1, desc=job["name"], unit="trial"))
                bar.total = int(job["progress"]["total"]) or 1
                bar.n = sum(job["progress"]["by_state"].get(s, 0) for s in ENDED_TRIALS)
                bar.set_postfix_str(job["state"])
                bar.refresh()
            if job["state"] in FINAL:
                ended[job_id] = job["state"]
                if bars:
                    shown[job_id].close()
        if len(ended) == len(ids):
            return ended
        time.sleep(poll_s)


def run(
    client: Client,
    campaign: Campaign,
    phase: str,
    tasks: Iterable[str],
    *,
    lr: float | None = None,
    epochs: int | None = None,
    tracking_uri: str | None = None,
    wait: bool = True,
    poll_s: float = 30.0,
    bars: bool = True,
) -> dict[str, str]:
    """Submit (or find) the phase's jobs; with `wait`, return job id -> final state."""
    documents = specs(campaign, phase, tasks, lr, epochs, client=client, tracking_uri=tracking_uri)
    ids = submit_all(client, documents)
    return wait_all(client, ids, poll_s, bars=bars) if wait else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.reproduction.run", description=__doc__.split("\n")[0]
    )
    parser.add_argument("phase", choices=["grid", "methods"])
    parser.add_argument("--tasks", default=",".join(TASKS), help="comma list (default: all five)")
    parser.add_argument(
        "--lr", type=float, help="methods: the learning rate (default: chosen from the grid jobs)"
    )
    parser.add_argument("--epochs", type=int, help="methods: the epochs (default: chosen from the grid jobs)")
    parser.add_argument(
        "--methods", default="", help="methods: comma list of report labels (default: all seven)"
    )
    parser.add_argument("--no-wait", action="store_true", help="submit (or find) the jobs and return")
    parser.add_argument("--poll", type=float, default=30.0, help="seconds between polls")
    args = parser.parse_args(argv)
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        parser.error(f"--tasks: not in the campaign: {', '.join(unknown)}")
    labels = [m for m in args.methods.split(",") if m]
    if unknown := sorted(set(labels) - {m.label for m in CAMPAIGN.methods}):
        parser.error(f"--methods: not in the campaign: {', '.join(unknown)}")
    wanted = tuple(m for m in CAMPAIGN.methods if m.label in labels) if labels else CAMPAIGN.methods
    campaign = dataclasses.replace(CAMPAIGN, methods=wanted)  # same job names: a subset, resumable
    with Client() as client:
        states = run(
            client,
            campaign,
            args.phase,
            tasks,
            lr=args.lr,
            epochs=args.epochs,
            tracking_uri=os.environ.get("MLFLOW_TRACKING_URI"),
            wait=not args.no_wait,
            poll_s=args.poll,
        )
    failed = [job for job, state in states.items() if state != "SUCCEEDED"]
    for job in failed:
        print(f"job {job} ended {states[job]}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
