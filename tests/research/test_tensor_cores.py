"""research.tensor_cores (issue 28's GPU measurement): the shapes it runs, what it writes after each, and
the goals it reads. bench.step.run is faked here; tests/bench/test_step_bench.py runs the real one."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from research import tensor_cores


def _fake_result(time_ratio: float, mem_ratio: float) -> dict[str, Any]:
    row = {"time_ratio": 1.0, "mem_ratio": 1.0, "mfu": 0.25, "flops_bf16_share": 1.0, "step_s": 0.04,
           "peak_mb": 7000.0}  # fmt: skip
    return {"methods": {m: dict(row) for m in tensor_cores.METHODS} | {
        f"smart{tensor_cores.LINEAR}": {**row, "time_ratio": time_ratio, "mem_ratio": mem_ratio},
        "smart-breg-only": {**row, "time_ratio": 1.2, "mem_ratio": 1.1},
    }}  # fmt: skip


def test_every_shape_is_measured_at_bf16_and_written_as_it_finishes(tmp_path: Path) -> None:
    out = tmp_path / "step_gpu.json"
    args = argparse.Namespace(out=out, models="bert-base=/tmp/models/bert-base", shapes="bert-base:512,minilm-l6:128",
                              compile_shapes="minilm-l6:128", batch_size=32, steps=10, device="cuda",
                              memory_parallel=7, methods="", compile_first=False)  # fmt: skip
    calls: list[argparse.Namespace] = []

    def fake_run(step: argparse.Namespace) -> dict[str, Any]:
        calls.append(step)
        if step.compile:
            raise RuntimeError("dynamo cannot trace the JVP")  # a finding, recorded; the run goes on
        if len(calls) == 2:  # the first shape is on disk before the second is measured
            assert "bert-basex512" in json.loads(out.read_text())["shapes"]
        return _fake_result(2.5 if step.seq_len == 128 else 3.4, 1.8)

    results = tensor_cores.measure(args, run=fake_run)
    assert [(c.model, c.seq_len, c.compile) for c in calls] == [
        ("/tmp/models/bert-base", 512, False), ("minilm-l6", 128, False), ("minilm-l6", 128, True)]  # fmt: skip
    assert all(c.precision == "bf16" and c.batch_size == 32 and c.padding_tasks == "" for c in calls)
    assert calls[0].methods.split(",")[0] == "vanilla" and calls[0].methods.endswith("vanilla@again")
    assert calls[2].methods == ",".join(tensor_cores.COMPILED)
    assert "RuntimeError: dynamo" in results["minilm-l6x128+compile"]["error"]
    document = json.loads(out.read_text())
    goals = document["goals"]
    linear = f"smart{tensor_cores.LINEAR}"
    assert goals[f"bert-basex512 {linear}"] == {"time_ratio": 3.4, "time_met": False, "mem_ratio": 1.8,
                                                 "mem_met": True}  # fmt: skip
    assert goals[f"minilm-l6x128 {linear}"]["time_met"] and goals["minilm-l6x128 smart-breg-only"]["time_met"]
    assert not any("+compile" in key for key in goals)
    table = tensor_cores.markdown(results)
    assert (
        "| bert-basex512 | vanilla@again | 1.00 | 1.00 | 25.0% | 100% |" in table
        and "error: RuntimeError" in table
    )


def test_compiled_shapes_can_go_first_with_fewer_methods(tmp_path: Path) -> None:
    args = argparse.Namespace(out=tmp_path / "step_gpu.json", models="", shapes="bert-base:512",
                              compile_shapes="minilm-l6:128", batch_size=32, steps=5, device="cuda",
                              memory_parallel=7, methods="vanilla,smart,vanilla@again", compile_first=True)  # fmt: skip
    calls: list[argparse.Namespace] = []

    def fake_run(step: argparse.Namespace) -> dict[str, Any]:
        calls.append(step)
        return _fake_result(3.0, 1.8)

    tensor_cores.measure(args, run=fake_run)
    assert [(c.seq_len, c.compile, c.methods) for c in calls] == [
        (128, True, ",".join(tensor_cores.COMPILED)), (512, False, "vanilla,smart,vanilla@again")]  # fmt: skip
    assert json.loads(args.out.read_text())["methods"] == ["vanilla", "smart", "vanilla@again"]


def test_a_shape_is_model_and_length() -> None:
    assert tensor_cores.shapes(" bert-base:512, minilm-l6:128 ,") == [("bert-base", 512), ("minilm-l6", 128)]
    with pytest.raises(ValueError, match="MODEL:SEQ_LEN"):
        tensor_cores.shapes("bert-base")
