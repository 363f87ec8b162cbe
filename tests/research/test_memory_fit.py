"""research.memory_fit: the least-squares fit recovers known coefficients, refuses too few points, and the
packaged table (service/costs/memory.json) is the fit of the committed H200 measurements."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from research.memory_fit import DEFAULT_OUT, DEFAULT_SOURCE, ROOT, document, entries, fit, main, predict


def _rows(fixed: float, a: float, b: float, noise: dict[tuple[int, int], float] | None = None) -> list[dict]:
    rows = []
    for batch in (8, 32):
        for seq in (128, 512):
            peak = fixed + batch * seq * (a + b * seq) + (noise or {}).get((batch, seq), 0.0)
            rows.append({"model": "m", "method": "smart", "precision": "fp32", "batch_size": batch,
                         "seq_len": seq, "peak_mb": peak, "weights_mb": 80.0, "params": 2e7, "hidden": 384,
                         "layers": 6})  # fmt: skip
    return rows


def test_the_fit_recovers_exact_coefficients() -> None:
    fixed, a, b = fit([(r["batch_size"], r["seq_len"], r["peak_mb"]) for r in _rows(250.0, 0.45, 7e-5)])
    assert (fixed, a, b) == pytest.approx((250.0, 0.45, 7e-5), rel=1e-9)


def test_residuals_are_stated_and_the_largest_excess_kept() -> None:
    (entry,) = entries(_rows(250.0, 0.45, 7e-5, noise={(8, 128): 40.0}))
    residuals = {(p["batch_size"], p["seq_len"]): p["residual_mb"] for p in entry["points"]}
    assert residuals[(8, 128)] > 0 and entry["max_residual_mb"] == max(residuals.values())
    for p in entry["points"]:  # the fit plus its largest excess is never below a measured point
        assert (
            predict(entry, p["batch_size"], p["seq_len"]) + entry["max_residual_mb"] >= p["measured_mb"] - 0.1
        )


def test_one_sequence_length_is_not_enough() -> None:
    rows = [r for r in _rows(250.0, 0.45, 7e-5) if r["seq_len"] == 128]
    with pytest.raises(ValueError, match="2 sequence lengths"):
        entries(rows)


def test_cpu_rows_without_a_peak_are_skipped() -> None:
    rows = _rows(250.0, 0.45, 7e-5) + [{**_rows(1, 1, 1)[0], "method": "vanilla", "peak_mb": None}]
    assert [e["method"] for e in entries(rows)] == ["smart"]


def test_the_packaged_table_is_the_fit_of_the_committed_measurements(tmp_path: Path) -> None:
    out = tmp_path / "memory.json"
    assert main([str(ROOT / DEFAULT_SOURCE), "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == json.loads((ROOT / DEFAULT_OUT).read_text())
    table = json.loads(out.read_text())
    assert table["device"] == "NVIDIA H200" and table["source"] == str(DEFAULT_SOURCE)
    measured = json.loads((ROOT / DEFAULT_SOURCE).read_text())
    assert len(table["entries"]) == len({(r["model"], r["method"], r["precision"]) for r in measured["rows"]})
    for entry in table["entries"]:
        assert entry["max_relative_residual"] < 0.1, entry  # the model fits every measured cell within 10%
        # gradients + AdamW's two moments (+ a teacher) are about 3-4 x the weights: never more than 5 x
        assert 0 < entry["fixed_mb"] < 5 * entry["weights_mb"] and entry["per_token_mb"] > 0


def test_a_teacher_costs_one_copy_of_the_weights() -> None:
    table = document(json.loads((ROOT / DEFAULT_SOURCE).read_text()), "x")
    fits = {(e["model"], e["method"], e["precision"]): e for e in table["entries"]}
    for model in ("minilm-l6", "bert-base"):
        teacher = (
            fits[(model, "smart-breg-only", "fp32")]["fixed_mb"]
            - fits[(model, "vanilla", "fp32")]["fixed_mb"]
        )
        assert teacher == pytest.approx(fits[(model, "vanilla", "fp32")]["weights_mb"], rel=0.35)
