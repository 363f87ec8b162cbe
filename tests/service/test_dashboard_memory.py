"""The pool page's GPU memory section (service/dashboard/memory.py): the nodes' advertised memory and what
Ray says is held there, the running GPU trials per job with their reservation, fraction and trials per GPU,
and another team's trials as a total only."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service.dashboard.memory import per_gpu
from service.store.db import Database
from service.store.models import Trial
from tests.service.dashboard_utils import logged_in
from tests.service.fakes import FakeRay
from tests.service.utils import spec, submit

NODES = [
    {"node": "10.0.0.7", "resources_total": {"CPU": 32, "GPU": 2, "gpu_memory_mb": 163118},
     "resources_available": {"CPU": 28, "GPU": 1.25, "gpu_memory_mb": 143118}},
    {"node": "10.0.0.8", "resources_total": {"CPU": 16}},  # a CPU node: not listed
]  # fmt: skip


def _running(db: Database, job_id: str, trial_id: str, metrics: dict[str, float]) -> None:
    with db.write_sessions() as session:
        session.add(
            Trial(job_id=job_id, trial_id=trial_id, attempt=1, state="RUNNING", params={}, metrics=metrics)
        )
        session.commit()


def test_the_pool_page_shows_gpu_memory_and_packing(
    client: TestClient, db: Database, fake_ray: FakeRay, team_key: str, other_key: str
) -> None:
    ours = submit(client, team_key, spec(resources={"gpus": 0.25, "gpu_memory_mb": 18000}))["id"]
    theirs = submit(client, other_key, spec(resources={"gpus": 0.5}))["id"]
    for i in range(3):
        _running(db, ours, f"t{i}", {"gpu_fraction": 0.25, "gpu_memory_reserved_mb": 20000.0})
    _running(db, ours, "t3", {})  # not logged yet: counts at its spec's figure
    _running(db, theirs, "u0", {"gpu_fraction": 0.5, "gpu_memory_reserved_mb": 40000.0})
    fake_ray.nodes = lambda: NODES  # type: ignore[attr-defined]
    logged_in(client, team_key)
    page = client.get("/ui/pool").text
    assert "GPU memory" in page and "10.0.0.7" in page and "10.0.0.8" not in page
    assert "163118" in page and "81559" in page
    assert '<meter min="0" max="163118.0" value="20000.0">' in page  # held on the node, as Ray says
    section = page.split("<h2>GPU memory</h2>")[1].split("<h2>Usage by team</h2>")[0]
    row = section.split(f'<a href="/ui/jobs/{ours}">')[1].split("</tr>")[0]
    cells = [c.split("</td>")[0] for c in row.split("<td>")[1:]]
    assert cells == ["4", "20000", "0.25", "4", str(3 * 20000 + 18000)]
    assert theirs not in section and "Other teams: 1 GPU trials running, 40000 MiB reserved" in page
    assert "Reserved by running trials</dt><dd>118000 MiB of 163118 MiB" in page


def test_without_a_node_list_the_page_says_so(client: TestClient, team_key: str) -> None:
    logged_in(client, team_key)
    page = client.get("/ui/pool").text
    assert "per-node GPU memory unknown" in page and "No GPU trial runs." in page


def test_trials_per_gpu() -> None:
    assert [per_gpu(f) for f in (0.25, 0.375, 0.5, 1.0, 2.0, 0.0625)] == [4, 2, 2, 1, 1, 16]
