"""The lent-GPU checks, on CPU: the campaign's trials run directly (research.reproduction.direct), the memory
grid (research.memory) and the stage runner (research.lent_gpu). The GPU itself is never needed here."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pytest

from research import lent_gpu, memory
from research.reproduction import direct, plan, records
from worker.contract.trial import TrainConfig


def _trials(tasks: list[str], examples: int | None = 1000) -> list[dict[str, object]]:
    return direct.trial_configs(plan.CAMPAIGN, tasks, learning_rate=5e-5, epochs=10, train_examples=examples,
                                overrides={"device": "cuda", "model": "/tmp/m"})  # fmt: skip


def test_direct_trials_are_the_services_trials_in_paired_order() -> None:
    trials = _trials(["stsb", "rte"])
    assert len(trials) == 2 * len(plan.METHODS) * len(plan.SEEDS)
    # RTE first (Table 3's small tasks), then seed by seed with every method inside a seed
    assert [(t["task"], t["seed"], t["_method"]) for t in trials[:8]] == [
        ("rte", 1, m.label) for m in plan.METHODS
    ] + [("rte", 2, "vanilla")]
    smart = next(t for t in trials if t["_method"] == "smart")
    config = TrainConfig.from_dict({k: v for k, v in smart.items() if not k.startswith("_")})
    # 1,000 rows train; the validation rows (repro-v2) are drawn beside them
    assert (config.device, config.model, config.max_train_samples) == ("cuda", "/tmp/m", 1250)
    assert config.validation_fraction == pytest.approx(0.2)
    assert config.method_params["rs_dropout"] == "shared" and config.length_grouping is False
    independent = next(t for t in trials if t["_method"] == "smart-independent")
    assert independent["method_params"].get("rs_dropout", "independent") == "independent"
    assert all(t["max_train_samples"] is None for t in _trials(["rte"], examples=None))


def test_the_direct_grid_is_the_campaigns_full_grid_job_by_trial() -> None:
    trials = direct.trial_configs(plan.CAMPAIGN, ["sst2", "mrpc"], learning_rate=None, epochs=None,
                                  train_examples=1000, overrides={}, grid=True)  # fmt: skip
    cells = len(plan.GRID_LEARNING_RATES) * len(plan.GRID_EPOCHS)
    assert len(trials) == 2 * cells * len(plan.GRID_SEEDS)
    assert {t["_method"] for t in trials} == {"grid-full"} and trials[0]["task"] == "mrpc"
    first_seed = trials[:cells]  # seed by seed, every cell inside a seed
    assert {t["seed"] for t in first_seed} == {plan.GRID_SEEDS[0]}
    assert {(t["learning_rate"], t["epochs"]) for t in first_seed} == {
        (lr, e) for lr in plan.GRID_LEARNING_RATES for e in plan.GRID_EPOCHS
    }
    assert len({records.trial_key(t) for t in trials}) == len(trials)
    with pytest.raises(ValueError, match="learning rate"):
        direct.trial_configs(plan.CAMPAIGN, ["rte"], learning_rate=None, epochs=None, train_examples=1000,
                             overrides={})  # fmt: skip


def test_a_direct_record_has_the_shape_collect_gives_a_service_trial() -> None:
    epochs = [{"metrics": {"accuracy": a}, "train_seconds": 2.0, "train_loss": 0.5,
               "components": {"loss": 0.5, "r_s": 1e-8}} for a in (0.5, 0.6)]  # fmt: skip
    result = {
        "epochs": epochs,
        "provenance": {"precision": "fp32"},
        "train_examples": 1000,
        "wall_seconds": 5.0,
    }
    row = direct.record({"task": "rte", "seed": 3, "_method": "smart", "learning_rate": 5e-5, "epochs": 2},
                        result, "cpu")  # fmt: skip
    assert row["value"] == pytest.approx(60.0) and row["curve"] == pytest.approx([50.0, 60.0])
    assert row["components"] == {"r_s": [1e-8, 1e-8]} and row["wall_s"] == 4.0
    issue_format = {"task", "method", "seed", "metric", "value", "epochs", "wall_s", "mlflow_run_id"}
    report_needs = {"curve", "epoch_seconds", "train_loss", "components", "learning_rate", "planned_epochs"}
    assert issue_format | report_needs <= set(row)


def _tiny_rte(root: Path) -> Path:
    folder = root / "RTE"
    folder.mkdir(parents=True)
    rows = ["index\tsentence1\tsentence2\tlabel"] + [
        f"{i}\tthe cat sat number {i}\ta cat sat {i % 3}\t{'entailment' if i % 2 else 'not_entailment'}"
        for i in range(24)
    ]
    for split in ("train", "dev"):
        (folder / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return root


@pytest.mark.usefixtures("starts_processes")  # --workers 2: a pool of spawned processes
def test_a_direct_run_trains_appends_records_and_skips_them_when_rerun(tmp_path: Path) -> None:
    data = _tiny_rte(tmp_path / "glue")
    out = tmp_path / "records.jsonl"
    argv = ["--out", str(out), "--tasks", "rte", "--methods", "vanilla,smart", "--seeds", "1", "--model",
            "tiny-random", "--data", str(data), "--train-examples", "16", "--epochs", "1",
            "--learning-rate", "5e-5", "--workers", "2"]  # fmt: skip
    assert direct.main(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["method"] for r in rows) == ["smart", "vanilla"]
    assert all(r["state"] == "TERMINATED" and r["train_examples"] == 16 and r["epochs"] == 1 for r in rows)
    smart = next(r for r in rows if r["method"] == "smart")
    assert smart["components"]["delta_linf"][0] == pytest.approx(1e-5, rel=1e-3)  # the paper's ε was applied
    assert direct.main(argv) == 0
    assert len(out.read_text().splitlines()) == 2  # nothing ran twice
    assert direct.run([], out, 1, stop_at=time.time()) == 0
    assert {r["concurrent_trials"] for r in rows} == {2}  # its seconds were measured two trials at a time


def test_merging_direct_records_replaces_a_trial_and_keeps_the_others(tmp_path: Path) -> None:
    into = tmp_path / "records.json"
    cell = {"learning_rate": 5e-5, "planned_epochs": 10}
    into.write_text(json.dumps([{"task": "rte", "method": "smart", "seed": 1, "value": 50.0, **cell},
                                {"task": "rte", "method": "vanilla", "seed": 1, "value": 55.0, **cell}]))  # fmt: skip
    source = tmp_path / "new.jsonl"
    rows = [{"task": "rte", "method": "smart", "seed": 1, "value": 56.0, "state": "TERMINATED", **cell},
            {"task": "mrpc", "method": "smart", "seed": 1, "state": "ERROR", "error": "OOM", **cell},
            {"task": "mrpc", "method": "vanilla", "seed": 2, "value": 80.0, "state": "TERMINATED", **cell},
            {"task": "mrpc", "method": "vanilla", "seed": 2, "value": 81.0, "state": "TERMINATED",
             "learning_rate": 1e-4, "planned_epochs": 10}]  # fmt: skip
    source.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert direct.main(["--out", str(source), "--merge-into", str(into)]) == 0
    merged = {(r["task"], r["method"], r["seed"]): r.get("value") for r in json.loads(into.read_text())}
    assert len(json.loads(into.read_text())) == 4  # another learning rate is another trial
    assert merged == {("rte", "smart", 1): 56.0, ("rte", "vanilla", 1): 55.0, ("mrpc", "vanilla", 2): 81.0}


def test_the_memory_grid_times_every_cell_on_cpu(glue_dir: Path) -> None:
    args = argparse.Namespace(models="tiny-random", methods="vanilla,smart", batch_sizes="2", seq_lens="16",
                              precisions="fp32", device="cpu", labels={})  # fmt: skip
    result = memory.run(args)
    assert [(r["method"], r["batch_size"], r["seq_len"]) for r in result["rows"]] == [
        ("vanilla", 2, 16),
        ("smart", 2, 16),
    ]
    assert all(r["peak_mb"] is None and r["step_s"] > 0 and r["weights_mb"] > 0 for r in result["rows"])


@pytest.mark.usefixtures("starts_processes")  # a stage and its child
def test_the_stage_runner_kills_a_stage_and_its_children_at_its_limit(tmp_path: Path) -> None:
    child = "import subprocess,sys,time; subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)']); time.sleep(60)"
    log = (tmp_path / "log.txt").open("w")
    tick = time.monotonic()
    code = lent_gpu._run_group([sys.executable, "-c", child], {}, log, timeout=2.0)
    assert code == 124 and time.monotonic() - tick < 20


def test_every_stage_has_a_command_within_its_budget(tmp_path: Path) -> None:
    args = argparse.Namespace(device="cuda", workers=6, reproduce_args="--tasks rte", memory_args="",
                              tensor_cores_args="--steps 5")  # fmt: skip
    for stage in (
        "smoke",
        "determinism",
        "memory",
        "numerics",
        "step",
        "reproduce",
        "tensor-cores",
        "profile",
        "quality",
    ):
        commands = lent_gpu.stage_commands(stage, tmp_path, 400.0, args)
        assert commands and all(limit <= 400 for _, limit in commands)
    ((reproduce, limit),) = lent_gpu.stage_commands("reproduce", tmp_path, 400.0, args)
    assert reproduce[-2:] == ["--tasks", "rte"] and "--deadline-s" in reproduce
    ((cores, limit),) = lent_gpu.stage_commands("tensor-cores", tmp_path, 400.0, args)
    assert cores[cores.index("-m") + 1] == "research.tensor_cores" and cores[-2:] == ["--steps", "5"]
    assert limit == 390.0  # the stage's budget, not a fixed 360 s (the H200 ran out of it, 30 Nov)
    profiles = lent_gpu.stage_commands("profile", tmp_path, 400.0, args)
    assert [c[c.index("--seq-len") + 1] for c, _ in profiles] == ["128", "512"]
    assert all(c[c.index("-m") + 1] == "research.kernel_profile" and limit <= 120 for c, limit in profiles)
    # smart_core.fused's helpers compiled (untagged: auto) and eager (@unfused), side by side
    assert "@unfused" in profiles[1][0][profiles[1][0].index("--methods") + 1]
    ((quality, limit),) = lent_gpu.stage_commands("quality", tmp_path, 400.0, args)
    methods = quality[quality.index("--methods") + 1].split(",")
    assert {"smart", "smart-linearized"} <= set(methods) and quality[
        quality.index("--precision") + 1
    ] == "bf16"
    assert float(quality[quality.index("--deadline-s") + 1]) < limit <= 400
    with pytest.raises(SystemExit, match="unknown stage"):
        lent_gpu.stage_commands("everything", tmp_path, 400.0, args)


def test_a_gpus_measured_steps_price_gpu_trials_in_the_packaged_table() -> None:
    from research.calibration import entries_from_memory
    from service.costs.calibration import default_document, from_document

    result = json.loads(
        (Path(__file__).resolve().parents[2] / "research/results/memory_h200.json").read_text()
    )
    entries = entries_from_memory(result, "bf16", 32, {"bert-base": "bert-base-uncased"}, "test")
    assert {(e["model"], e["max_seq_length"]) for e in entries} == {
        (m, s) for m in ("minilm-l6", "bert-base-uncased") for s in (128, 512)
    }
    smart = next(
        e for e in entries if (e["model"], e["method"], e["max_seq_length"]) == ("minilm-l6", "smart", 128)
    )
    row = next(r for r in result["rows"] if (r["model"], r["method"], r["batch_size"], r["seq_len"], r["precision"])
               == ("minilm-l6", "smart", 32, 128, "bf16"))  # fmt: skip
    assert smart["train_s_per_example"] == pytest.approx(row["step_s"] / 32)
    packaged = from_document(
        default_document()
    )  # `python -m research.calibration --from-memory` was run on it
    match = packaged.lookup("bert-base-uncased", "smart", 512, "NVIDIA H200")
    assert match is not None and match.fallback is None
    assert (
        match.train_s_per_example
        > packaged.lookup("bert-base-uncased", "vanilla", 512, "NVIDIA H200").train_s_per_example
    )


def test_compare_says_whether_two_runs_of_the_same_trials_are_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    row = {"task": "rte", "method": "smart", "seed": 1, "curve": [50.0, 51.0], "train_loss": [0.7, 0.6],
           "components": {"r_s": [1e-8, 2e-8]}}  # fmt: skip
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    a.write_text(json.dumps(row) + "\n")
    b.write_text(json.dumps(row) + "\n")
    c.write_text(json.dumps(row | {"train_loss": [0.7, 0.6001]}) + "\n")
    assert lent_gpu.compare(a, b) == 0
    assert lent_gpu.compare(a, c) == 1
    out = capsys.readouterr().out
    decoder, reports, at = json.JSONDecoder(), [], 0
    while at < len(out.rstrip()):
        report, at = decoder.raw_decode(out, at)
        reports.append(report)
        at += 1
    assert [r["identical"] for r in reports] == [True, False]
    assert reports[1]["max_abs_difference"]["rte/smart/1/train_loss"] == pytest.approx(1e-4)
    assert lent_gpu.main(["compare", str(a), str(b)]) == 0


def test_an_earlier_leases_trials_seed_the_stages_records(tmp_path: Path) -> None:
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_text('{"task": "rte", "seed": 1}\n')
    out = tmp_path / "out"
    out.mkdir()
    lent_gpu.seed_earlier_trials(argparse.Namespace(out=out, quality_from=None, reproduce_from=earlier))
    assert (out / "direct.jsonl").read_text() == earlier.read_text()
    assert not (out / "quality.jsonl").exists()
    lent_gpu.seed_earlier_trials(argparse.Namespace(out=out, quality_from=earlier, reproduce_from=None))
    assert (out / "quality.jsonl").read_text() == earlier.read_text()
