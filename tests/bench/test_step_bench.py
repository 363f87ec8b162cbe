"""Tests for bench.step / bench.stepper / bench.padding: a quick end-to-end run of `smartune bench step`
on the tiny model.

Checks the JSON's shape, not speed: every ratio finite and positive, vanilla's ratios exactly 1.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from bench import clean_median, timed
from bench import flops as flops_module
from bench.flops import DtypeFlops, matmul_rate
from bench.padding import fixed_batch, glue_root, padding_benchmark
from bench.step import amortized, expand_methods, main
from bench.stepper import Stepper, parse_variant
from worker.contract.sources import TINY_RANDOM_ALIAS
from worker.training.models import resolve_model


def _args(**overrides: Any) -> argparse.Namespace:
    base = {
        "model": TINY_RANDOM_ALIAS,
        "methods": "vanilla,smart,vanilla@again",
        "precision": "bf16",
        "batch_size": 4,
        "seq_len": 16,
        "steps": 2,
        "device": "cpu",
        "padding_tasks": "rte",
        "json": True,
        "padding_examples": 32,  # not a CLI flag: a small subset keeps the test quick
    }
    return argparse.Namespace(**{**base, **overrides})


@pytest.fixture(scope="module")
def result(starts_processes: None) -> dict[str, Any]:
    """One quick run, shared by the shape tests (a module-scoped fixture cannot use capsys); its memory is
    measured in one child process per method."""
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setenv("TRANSFORMERS_OFFLINE", "1")
    stdout = io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout):
            assert main(_args()) == 0
    finally:
        mp.undo()
    return json.loads(stdout.getvalue())


def _finite_positive(x: Any) -> bool:
    return isinstance(x, float | int) and math.isfinite(x) and x > 0


def test_json_shape(result: dict[str, Any]) -> None:
    assert set(result) >= {"methods", "peer", "padding", "setup"}
    assert set(result["methods"]) == {"vanilla", "smart", "vanilla@again"}
    for entry in result["methods"].values():
        assert set(entry) == {"step_s", "peak_mb", "time_ratio", "mem_ratio", "flops_bf16_share", "matmul_gflop",
                              "launches", "launch_ratio", "fused_launches", "fused_launch_ratio", "mfu"}  # fmt: skip
        share = entry["flops_bf16_share"]  # 0 for an exact fp32 step
        assert all(_finite_positive(v) for k, v in entry.items() if k != "flops_bf16_share"), entry
        assert 0.0 <= share <= 1.0
    # the twin is the same step: the same FLOPs (its time and memory differ by the noise alone)
    assert result["methods"]["vanilla@again"]["matmul_gflop"] == result["methods"]["vanilla"]["matmul_gflop"]
    assert result["methods"]["smart"]["matmul_gflop"] > 2 * result["methods"]["vanilla"]["matmul_gflop"]
    assert result["methods"]["vanilla@again"]["launch_ratio"] == 1.0
    assert result["methods"]["smart"]["launch_ratio"] > 1.5  # a second forward and backward at least
    # counted at the step the median times, without the diagnostics (about 4x vanilla's with them)
    assert result["methods"]["smart"]["launch_ratio"] < 3.3
    # the exact step calls no smart_core.fused helper: compiled or not, the same launches
    assert result["methods"]["smart"]["fused_launches"] == result["methods"]["smart"]["launches"]
    # Not 1 on CPU: SDPA with attention dropout falls back to its math backend, which computes bf16 in fp32.
    assert result["methods"]["vanilla"]["flops_bf16_share"] > 0.8
    assert result["methods"]["smart"]["flops_bf16_share"] < 0.1  # independent dropout: the exact fp32 step
    setup = result["setup"]
    assert setup["batch_size"] == 4 and setup["seq_len"] == 16 and setup["steps"] == 2
    assert setup["device"] == "cpu" and setup["torch"] == torch.__version__
    assert setup["precision"] == "bf16" and not setup["compile"] and _finite_positive(setup["matmul_tflops"])
    assert "memory" in setup and "threads" in setup and "timing_contended" in setup
    assert set(result["spread"]) == {"vanilla", "smart", "vanilla@again", "smart-pytorch"}


def test_vanilla_is_the_unit(result: dict[str, Any]) -> None:
    assert result["methods"]["vanilla"]["time_ratio"] == 1.0
    assert result["methods"]["vanilla"]["mem_ratio"] == 1.0


def test_peer_is_timed(result: dict[str, Any]) -> None:
    peer = result["peer"]["smart_pytorch"]
    assert _finite_positive(peer["step_s"]) and _finite_positive(peer["time_ratio"])


def test_padding_entry(result: dict[str, Any]) -> None:
    rte = result["padding"]["rte"]
    if glue_root() is None or not (Path(glue_root()) / "RTE" / "train.tsv").is_file():
        assert "skipped" in rte
        return
    assert rte["examples"] == 32
    for key in ("grouped_examples_per_s", "pad128_examples_per_s", "speedup"):
        assert _finite_positive(rte[key]), rte


def test_fixed_batch_has_exact_length() -> None:
    _, tokenizer = resolve_model(
        TINY_RANDOM_ALIAS, num_labels=2, is_regression=False, head_dropout=0.1, seed=0
    )
    batch, labels, source = fixed_batch(tokenizer, 3, 12)
    assert batch["input_ids"].shape == (3, 12) == batch["attention_mask"].shape
    assert labels.shape == (3,) and source


def test_missing_data_is_skipped_with_a_reason(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SMARTUNE_GLUE_DIR", str(tmp_path))

    def no_step(_num_labels: int) -> Any:
        raise AssertionError("no model is needed for a skipped task")

    out = padding_benchmark(["rte", "stsb"], None, no_step, torch.device("cpu"))
    assert "not found" in out["rte"]["skipped"]
    assert out["stsb"]["skipped"]


def test_unknown_method_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        main(_args(methods="vanilla,nope"))
    with pytest.raises(ValueError, match="METHOD\\+field=value"):
        main(_args(methods="vanilla,smart+nope=1"))
    with pytest.raises(ValueError, match="must include vanilla"):
        main(_args(methods="smart"))


def test_a_bf16_stepper_runs_its_forward_under_autocast_and_its_backward_after() -> None:
    model, tokenizer = resolve_model(
        TINY_RANDOM_ALIAS, num_labels=2, is_regression=False, head_dropout=0.0, seed=0
    )
    batch, labels, _ = fixed_batch(tokenizer, 2, 8)
    counts = {}
    for precision in ("fp32", "bf16"):
        counter = DtypeFlops()
        with counter:
            Stepper(copy.deepcopy(model), "vanilla", torch.device("cpu"), precision=precision).step(
                batch, labels
            )
        counts[precision] = counter
    assert counts["fp32"].share(torch.bfloat16) == 0.0
    assert counts["bf16"].share(torch.bfloat16) > 0.8 and counts["bf16"].total() == counts["fp32"].total()
    with pytest.raises(ValueError, match="precision must be one of fp32, bf16"):
        Stepper(model, "vanilla", torch.device("cpu"), precision="fp16")


def _tagged_steps(monkeypatch: pytest.MonkeyPatch, probe: Any) -> tuple[Any, Any, Any, list[Any]]:
    """(tiny model, batch, labels, seen): each backward from now on appends `probe()` to `seen` first, so a
    test reads what a tag had set while the step's backward ran."""
    model, tokenizer = resolve_model(
        TINY_RANDOM_ALIAS, num_labels=2, is_regression=False, head_dropout=0.0, seed=0
    )
    batch, labels, _ = fixed_batch(tokenizer, 2, 8)
    seen: list[Any] = []
    real_backward = torch.Tensor.backward
    monkeypatch.setattr(torch.Tensor, "backward", lambda self, *a, **k: (seen.append(probe()),
                                                                        real_backward(self, *a, **k))[1])  # fmt: skip
    return model, batch, labels, seen


def test_a_fused_or_unfused_tag_sets_smart_cores_helpers_for_the_step_and_its_backward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from smart_core import fused

    model, batch, labels, seen = _tagged_steps(monkeypatch, fused.mode)
    for label in ("smart-breg-only@fused", "smart-breg-only@unfused", "smart-breg-only@again"):
        Stepper(copy.deepcopy(model), label, torch.device("cpu")).step(batch, labels)
    assert seen == ["on", "off", "auto"] and fused.mode() == "auto"


def test_a_wide_tag_sets_attentions_accelerator_chunks_for_the_step_and_its_backward(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import smart_core.attention as attention

    default = attention.ACCELERATOR_CHUNK_ELEMENTS
    model, batch, labels, seen = _tagged_steps(monkeypatch, lambda: attention.ACCELERATOR_CHUNK_ELEMENTS)
    for label in ("smart-breg-only@wide", "smart-breg-only"):
        Stepper(copy.deepcopy(model), label, torch.device("cpu")).step(batch, labels)
    assert seen == [2**27, default] and attention.ACCELERATOR_CHUNK_ELEMENTS == default
    failing = Stepper(copy.deepcopy(model), "smart-breg-only@wide", torch.device("cpu"))
    monkeypatch.setattr(failing, "loss", lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        failing.step(batch, labels)
    assert attention.ACCELERATOR_CHUNK_ELEMENTS == default  # restored when the step fails too


def test_the_matmul_rate_is_flops_over_the_best_time(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter([0.0, 10.0, 12.0, 20.0, 24.0])  # an untimed first run (its start only), then 2 s and 4 s
    monkeypatch.setattr(flops_module.time, "perf_counter", lambda: next(ticks))
    rate = matmul_rate(torch.device("cpu"), torch.float32, size=64, repeats=2)
    assert rate == 2 * 64**3 / 2.0
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        monkeypatch.setattr(flops_module.time, "perf_counter", iter([0.0, 1.0, 2.0]).__next__)
        matmul_rate(torch.device("cpu"), torch.float32, size=8, repeats=1)
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(before)


def test_method_variants_and_dropout_modes_expand_and_amortize() -> None:
    assert parse_variant("vanilla@again") == parse_variant("vanilla")
    assert parse_variant("smart+rs_dropout=shared@2").rs_dropout == "shared"
    assert parse_variant("smart+rs_dropout=shared+diagnostics_every=1").rs_dropout == "shared"
    assert expand_methods("vanilla,smart,freelb", "independent,shared,off") == [
        "vanilla", "smart", "freelb", "smart+rs_dropout=shared", "smart+rs_dropout=off"]  # fmt: skip
    # A diagnosed step every 10: the mean step is the plain one plus a tenth of the difference.
    assert amortized({"smart": 1.0, "smart+diagnostics_every=1": 2.0, "vanilla": 0.4}) == {"smart": 1.1}


def test_contended_samples_are_left_out_of_the_median() -> None:
    assert clean_median([1.0, 9.0, 2.0, 3.0], [True, False, True, True]) == 2.0
    assert clean_median([5.0, 7.0], [False, False]) == 6.0  # none clean: all samples
    seconds, foreign = timed(lambda: sum(range(10_000)), torch.device("cpu"))
    assert seconds > 0 and foreign >= 0
