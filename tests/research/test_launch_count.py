"""research.launch_count: eager and fused launch counts per method (tiny random BERT)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import smart_core.attention as attention
from research import launch_count


def test_fused_counts_are_fewer_for_the_linearised_step_only(tmp_path: Path) -> None:
    out = tmp_path / "launches.json"
    linearised = "smart+rs_arithmetic=auto+rs_dropout=shared+diagnostics_every=0"
    chunks = attention.CHUNK_ELEMENTS
    assert launch_count.main(["--model", "tiny-random", "--batch-size", "2", "--seq-len", "16", "--out", str(out),
                              "--methods", f"vanilla,smart-breg-only,{linearised}"]) == 0  # fmt: skip
    assert attention.CHUNK_ELEMENTS == chunks  # the GPU's chunking only while counting
    result = json.loads(out.read_text())
    rows = result["methods"]
    assert rows["vanilla"]["launch_ratio"] == rows["vanilla"]["fused_launch_ratio"] == 1.0
    assert rows["smart-breg-only"]["fused_launches"] == rows["smart-breg-only"]["launches"]  # no helpers
    assert rows[linearised]["helper_calls"] > 0
    assert rows[linearised]["fused_launches"] < 0.7 * rows[linearised]["launches"]
    assert result["setup"]["chunk_elements"] == attention.ACCELERATOR_CHUNK_ELEMENTS


def test_vanilla_comes_first() -> None:
    with pytest.raises(ValueError, match="start with vanilla"):
        launch_count.main(["--model", "tiny-random", "--methods", "smart,vanilla"])
