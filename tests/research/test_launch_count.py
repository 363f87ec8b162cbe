"""research.launch_count: eager and fused launch counts per method (tiny random BERT)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

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


def test_a_smaller_counted_batch_chunked_as_the_full_one_counts_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A budget small enough that the tiny model's 16 queries split into chunks, so the scaling is exercised.
    monkeypatch.setattr(attention, "ACCELERATOR_CHUNK_ELEMENTS", 2**9)
    linearised = "smart+rs_arithmetic=auto+rs_dropout=shared+diagnostics_every=0"
    counts = {}
    for rows in (4, 2):
        out = tmp_path / f"launches_{rows}.json"
        assert launch_count.main(["--model", "tiny-random", "--batch-size", "4", "--count-batch-size", str(rows),
                                  "--seq-len", "16", "--out", str(out), "--methods", f"vanilla,{linearised}"]) == 0  # fmt: skip
        result = json.loads(out.read_text())
        assert result["setup"]["counted_batch_size"] == rows
        assert result["setup"]["counted_chunk_elements"] == 2**9 // (4 // rows)
        counts[rows] = {m: (r["launches"], r["fused_launches"]) for m, r in result["methods"].items()}
    assert counts[2] == counts[4]
    assert counts[4][linearised][0] > counts[4]["vanilla"][0]


def test_the_counted_rows_keep_the_batch_s_most_padded_row() -> None:
    mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 0, 0]])
    batch = {"input_ids": torch.arange(12).reshape(4, 3), "attention_mask": mask}
    kept, labels, source = launch_count.counted_rows(batch, torch.arange(4), "RTE", 2)
    assert kept["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert labels.tolist() == [0, 3]
    assert "2 of its rows" in source
    assert launch_count.counted_rows(batch, torch.arange(4), "RTE", 4)[0] is batch


@pytest.mark.parametrize(("batch_size", "rows", "why"),
                         [(32, 3, "must divide"), (32, 0, "must divide"), (24, 8, "must divide"), (4, 1, "at least 2")])  # fmt: skip
def test_a_counted_batch_must_divide_the_batch_and_the_budget_and_have_two_rows(
    batch_size: int, rows: int, why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        launch_count.chunk_budget(batch_size, rows)
    assert launch_count.chunk_budget(1, 1) == attention.ACCELERATOR_CHUNK_ELEMENTS


def test_a_smart_step_is_counted_with_and_without_its_diagnostics(tmp_path: Path) -> None:
    out = tmp_path / "launches.json"
    every_5 = "smart+diagnostics_every=5"
    assert launch_count.main(["--model", "tiny-random", "--batch-size", "2", "--seq-len", "16", "--out", str(out),
                              "--methods", f"vanilla,{every_5},smart+diagnostics_every=0"]) == 0  # fmt: skip
    rows = json.loads(out.read_text())["methods"]
    vanilla, smart, never = rows["vanilla"], rows[every_5], rows["smart+diagnostics_every=0"]
    assert vanilla["diagnostics_launches"] == vanilla["launches"] and vanilla["diagnostics_every"] == 0
    # the exact step's diagnostics: two no-grad forwards for R_s at δ = 0, two gradients for the ascent signal
    assert smart["diagnostics_launches"] > 1.5 * smart["launches"]
    assert smart["launches"] == never["launches"] == never["diagnostics_launches"]  # nothing else differs
    extra = smart["diagnostics_fused_launches"] - smart["fused_launches"]
    assert smart["mean_fused_launches"] == pytest.approx(smart["fused_launches"] + extra / 5)
    assert smart["mean_fused_launch_ratio"] == pytest.approx(
        smart["mean_fused_launches"] / vanilla["fused_launches"]
    )


def test_the_diagnostics_period_of_each_kind_of_method() -> None:
    assert launch_count.diagnostics_period("smart") == 10
    assert launch_count.diagnostics_period("smart+diagnostics_every=3@wide") == 3
    assert launch_count.diagnostics_period("smart-breg-only") == 0  # no R_s: nothing to diagnose
    assert launch_count.diagnostics_period("vanilla") == 0
    assert launch_count.diagnostics_period("smart-pytorch") == 0
