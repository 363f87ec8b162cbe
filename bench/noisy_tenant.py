"""The noisy team of `smartune bench load --noisy-neighbour` (bench/noisy_neighbour.py), as its own process.

It runs apart from the quiet team's clients so that its work on the client side (building uploads, parsing
answers) does not delay when the quiet team's answers are read: what the quiet team sees is the server's
doing. Each of its keys (all in one team) has `concurrency` requests in flight, each loop alternating, as
fast as answers come, between uploading a new dataset (distinct content, about `upload_rows` RTE rows) and
submitting a job. It keeps on after every refusal: a 409 (its storage quota: an upload that would pass it, a
job while it is used up) and a 429 of its queue limit are answered by the next request at once; only the
rate limiter's 429 is waited out, as that is the most the service lets a key send (its limit).

Reads one JSON object on stdin (`url`, `keys`, `concurrency`, `windows`: [start, end) wall-clock seconds to
send in, idle between them, `upload_rows`, `job`) and prints one: the answers by endpoint and status, the
ids of the jobs it got queued, the bytes of the uploads it got accepted, and how long before the first
window it was ready (negative: it started late).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections import Counter, defaultdict
from typing import Any

HEADER = "index\tsentence1\tsentence2\tlabel"
WORDS = "the a cat dog runs sleeps near far big small red blue house river".split()


def rte_rows(n: int, seed: int) -> bytes:
    """`n` made-up RTE rows (a GLUE TSV), different for each seed: each upload is new content."""
    rng = random.Random(seed)
    lines = [HEADER]
    for i in range(n):
        pair = [" ".join(rng.choices(WORDS, k=8)) for _ in range(2)]
        lines.append(f"{i}\t{pair[0]}\t{pair[1]}\t{rng.choice(['entailment', 'not_entailment'])}")
    return ("\n".join(lines) + "\n").encode()


class Answers:
    """What the noisy team was told, shared by its clients (one event loop: no locks)."""

    def __init__(self) -> None:
        self.statuses: dict[str, Counter[str]] = defaultdict(Counter)  # endpoint -> status ("no answer")
        self.jobs: list[str] = []  # queued job ids
        self.uploaded_bytes = 0  # the datasets it had accepted (their files' bytes, as the service counts)

    def report(self) -> dict[str, Any]:
        return {
            "statuses": {
                name: dict(sorted(counts.items())) for name, counts in sorted(self.statuses.items())
            },
            "accepted_jobs": self.jobs,
            "uploaded_bytes": self.uploaded_bytes,
        }


def _upload(http: Any, n: int, i: int, rows: int) -> Any:
    import aiohttp

    form = aiohttp.FormData()
    form.add_field("name", f"noisy-{n}-{i}")
    form.add_field("task", "rte")
    for split, count in (("train.tsv", rows), ("dev.tsv", max(8, rows // 8))):
        form.add_field("files", rte_rows(count, n * 1_000_003 + i * 2 + len(split)), filename=split)
    return http.post("/api/v1/datasets", data=form)


async def _client(http: Any, n: int, plan: dict[str, Any], answers: Answers) -> None:
    """Client `n`'s requests in each of the plan's windows (wall-clock [start, end) seconds); idle between."""
    import aiohttp

    i = 0
    for start, end in plan["windows"]:
        await asyncio.sleep(max(0.0, start - time.time()))
        while time.time() < end:
            if i % 2 == 0:
                name, request = "POST /datasets", _upload(http, n, i, int(plan["upload_rows"]))
            else:
                job = {**plan["job"], "seeds": [n * 10_000 + i]}
                name, request = "POST /jobs", http.post("/api/v1/jobs", json=job)
            i += 1
            try:
                async with request as response:
                    payload = await response.read()
            except (aiohttp.ClientError, TimeoutError):
                answers.statuses[name]["no answer"] += 1
                continue
            answers.statuses[name][str(response.status)] += 1
            if response.status == 201 and name == "POST /jobs":
                answers.jobs.append(json.loads(payload)["id"])
            elif response.status == 201:
                answers.uploaded_bytes += int(json.loads(payload).get("size_bytes", 0))
            elif response.status == 429 and b"rate limit" in payload:
                await asyncio.sleep(float(response.headers.get("Retry-After", "1")))


async def _tenant(plan: dict[str, Any]) -> dict[str, Any]:
    import aiohttp

    per_key = int(plan["concurrency"])  # requests in flight per key: a script at its limits runs several
    timeout = aiohttp.ClientTimeout(60)
    sessions = [
        aiohttp.ClientSession(plan["url"], headers={"Authorization": f"Bearer {key}"}, timeout=timeout)
        for key in plan["keys"]
    ]
    ready_ahead = float(plan["windows"][0][0]) - time.time()  # > 0: it was ready before the first window
    answers = Answers()
    try:
        await asyncio.gather(
            *(
                _client(http, n * per_key + c, plan, answers)
                for n, http in enumerate(sessions)
                for c in range(per_key)
            )
        )
    finally:
        await asyncio.gather(*(s.close() for s in sessions))
    return {**answers.report(), "ready_ahead_s": round(ready_ahead, 3)}


def main() -> int:
    plan = json.load(sys.stdin)
    print(json.dumps(asyncio.run(_tenant(plan))))  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
