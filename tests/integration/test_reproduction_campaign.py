"""One tiny reproduction campaign end to end against a real server on a real Ray head: jobs in over REST,
records out of MLflow, the grid's choice feeding the methods phase, and a resubmission that finds the
jobs instead of running their cells again."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import smartune
from research.reproduction import report
from research.reproduction.collect import choose, collect, write
from research.reproduction.plan import METHODS, Campaign
from research.reproduction.run import run
from tests.integration.client import Api
from tests.support.cluster import Server

BY_LABEL = {m.label: m for m in METHODS}
TINY = Campaign(
    name="repro-test",
    tasks=("rte",),
    model="tiny-random",
    training={
        "batch_size": 8,
        "max_seq_length": 32,
        "max_train_samples": 16,
        "max_eval_samples": 16,
        "length_grouping": False,
    },  # fmt: skip
    seeds=(1, 2),
    grid_seeds=(1,),
    grid_learning_rates=(1e-3,),
    grid_epochs=(1, 2),
    methods=(BY_LABEL["vanilla"], BY_LABEL["smart-breg-only"]),
    concurrency=1,  # Tune reuses one trial process per job
)


@pytest.mark.timeout(600)
def test_a_tiny_campaign_through_a_real_server_and_mlflow(server: Server, tmp_path: Path) -> None:
    key = Api(server, server.admin_key()).team_key("repro")
    tracking = f"sqlite:///{server.data_dir / 'mlflow.db'}"
    with smartune.Client(server.url, key) as client:
        grid = run(client, TINY, "grid", TINY.tasks, poll_s=1, bars=False)
        assert sorted(grid.values()) == ["SUCCEEDED", "SUCCEEDED"]
        chosen = choose(collect(client, tracking, TINY))
        assert (chosen["learning_rate"], chosen["tasks"]) == (1e-3, ["rte"])
        methods = run(client, TINY, "methods", TINY.tasks, tracking_uri=tracking, poll_s=1, bars=False)
        assert sorted(methods.values()) == ["SUCCEEDED", "SUCCEEDED"]
        jobs_before = len(client.jobs())
        again = run(client, TINY, "methods", TINY.tasks, lr=chosen["learning_rate"], epochs=chosen["epochs"],
                    poll_s=1, bars=False)  # fmt: skip
        assert again == methods and len(client.jobs()) == jobs_before  # found, not run again
        records = collect(client, tracking, TINY)

    grid_records = [r for r in records if r["method"].startswith("grid")]
    method_records = [r for r in records if not r["method"].startswith("grid")]
    assert len(grid_records) == 2 * 2  # 2 epochs values x 1 seed, full and ASHA
    assert sorted((r["method"], r["seed"]) for r in method_records) == [
        ("smart-breg-only", 1), ("smart-breg-only", 2), ("vanilla", 1), ("vanilla", 2)]  # fmt: skip
    for r in method_records:
        assert r["epochs"] == chosen["epochs"] == len(r["epoch_seconds"]) and r["metric"] == "accuracy"
        assert 0 <= r["value"] <= 100 and all(s > 0 for s in r["epoch_seconds"]) and r["mlflow_run_id"]
    breg = next(r for r in method_records if r["method"] == "smart-breg-only")
    assert breg["components"]["d_breg"] and all(math.isfinite(v) for v in breg["components"]["d_breg"])
    write(records, tmp_path / "ablation.json", tmp_path / "grid.json")
    assert len(json.loads((tmp_path / "ablation.json").read_text())) == 4
    assert "| smart-breg-only | 2 |" in report.render(method_records, grid_records)
