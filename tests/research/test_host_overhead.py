"""research.host_overhead: host time and launches per method at negligible compute (tiny random BERT)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from research import host_overhead


def test_every_method_gets_its_host_time_and_launches(tmp_path: Path) -> None:
    out = tmp_path / "host.json"
    assert host_overhead.main(["--model", "tiny-random", "--rounds", "2", "--out", str(out),
                               "--methods", "vanilla,smart,smart-breg-only"]) == 0  # fmt: skip
    result = json.loads(out.read_text())
    rows = result["methods"]
    assert list(rows) == ["vanilla", "smart", "smart-breg-only"]
    assert rows["vanilla"]["host_ratio"] == 1.0 and rows["vanilla"]["launch_ratio"] == 1.0
    assert all(r["host_ms"] > 0 for r in rows.values())
    assert rows["smart"]["launch_ratio"] > rows["smart-breg-only"]["launch_ratio"] > 1.0
    assert result["setup"]["threads"] == 1 and result["setup"]["batch_size"] == 1


def test_vanilla_comes_first() -> None:
    args = argparse.Namespace(methods="smart,vanilla", model="tiny-random", batch_size=1, seq_len=8, rounds=1)
    with pytest.raises(ValueError, match="start with vanilla"):
        host_overhead.run(args)
