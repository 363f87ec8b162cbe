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


def test_a_fused_arm_runs_the_compiled_helpers_and_counts_no_launches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from smart_core import fused

    compiled: list[str] = []

    def compile_(fn: object, **_: object) -> object:  # inductor takes minutes here: the helpers run as traced
        compiled.append(getattr(fn, "__qualname__", "?"))
        return fn

    monkeypatch.setattr(torch, "compile", compile_)
    monkeypatch.setattr(fused, "_compiled", {})
    linearised = "smart+rs_arithmetic=auto+rs_dropout=shared"
    out = tmp_path / "host.json"
    assert host_overhead.main(["--model", "tiny-random", "--rounds", "1", "--out", str(out),
                               "--methods", f"vanilla,{linearised},{linearised}@fused"]) == 0  # fmt: skip
    rows = json.loads(out.read_text())["methods"]
    assert rows[f"{linearised}@fused"]["launches"] is None and rows[f"{linearised}@fused"]["host_ms"] > 0
    assert rows[linearised]["launch_ratio"] > 1.0
    helpers = {"_tangent", "_output", "_traced_vjp.<locals>.gradients"}  # what the @fused arm compiled
    assert helpers <= set(compiled)
