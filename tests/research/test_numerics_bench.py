"""`python -m research.numerics` on the tiny model: well-formed output, and the invariants its table rests on."""

from __future__ import annotations

import argparse

from research.numerics import PRECISIONS, SCALES, markdown, run


def test_numerics_bench_on_the_tiny_model() -> None:
    args = argparse.Namespace(model="tiny-random", pairs=4, seq_len=16, draws=2, threads=1, json=True)
    result = run(args)
    rows = {(r["projection"], r["rs_dropout"], r["precision"]): r for r in result["regulariser"]}
    assert len(rows) == 2 * 3 * len(PRECISIONS)
    for projection in ("ball", "renorm"):
        for mode in ("shared", "off"):  # same masks or none: nothing but the perturbation differs
            assert rows[(projection, mode, "fp32")]["r_s_control"]["mean"] == 0.0
        assert rows[(projection, "independent", "fp32")]["r_s_control"]["mean"] > 0  # a second dropout draw
        # Under bf16 the trainer (rs_arithmetic fp32, the default) leaves bf16 for every paper setting (σ = 1e-5
        # starts the ascent), never in fp32; `auto` would linearise the `shared` ones (tests/smart_core).
        assert rows[(projection, "shared", "bf16-trained")]["fp32_step"]["mean"] == 1.0
        assert rows[(projection, "independent", "bf16-trained")]["fp32_step"]["mean"] == 1.0
        assert rows[(projection, "shared", "fp32")]["fp32_step"]["mean"] == 0.0
    assert rows[("ball", "shared", "fp32")]["delta_linf"]["mean"] <= 1e-5 * (1 + 1e-6)
    assert [r["scale"] for r in result["resolution"]] == list(SCALES)
    assert result["resolution"][-1]["fp32"]["param_grad_cosine"] > 0.999
    assert "| ball | shared | fp32 |" in markdown(result)
    # The linearised R_s resolves the paper's ε under bf16, where the plain bf16 difference reads noise.
    paper = next(r for r in result["resolution"] if r["scale"] == 1e-5)
    assert paper["bf16-linearized"]["param_grad_cosine"] > 0.98
    assert paper["bf16-linearized"]["r_s_relative_error"] < 0.1
    assert paper["bf16"]["r_s_relative_error"] >= 0.5  # rounding noise, or nothing at all (1.0)
    assert "bf16-linearized grad cos" in markdown(result)


def test_numerics_runs_only_the_parts_asked_for() -> None:
    args = argparse.Namespace(
        model="tiny-random", pairs=2, seq_len=8, draws=1, threads=1, json=True, parts="resolution"
    )
    result = run(args)
    assert result["regulariser"] == [] and len(result["resolution"]) == len(SCALES)
