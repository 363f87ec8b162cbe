"""service.costs.memory: a trial's peak accelerator memory from the packaged H200 fit, scaled to unmeasured
models, corrected by trials that ran here (service.costs.refresh.memory_peaks), pinned into a spec and shown
by the dry run; and the embedded head's GPU-memory probe (service.engine.local_head)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from service.config import Settings
from service.costs import estimate, memory
from service.costs.calibration import from_document as calibration_table
from service.costs.memory import (
    ALLOCATOR_RESERVE,
    CUDA_CONTEXT_MB,
    Shape,
    default_document,
    default_table,
    estimate_memory_mb,
    from_document,
)
from service.costs.refresh import memory_peaks
from service.engine.local_head import gpu_memory_mb, resource_args
from service.store import crud
from service.store.db import connect, migrate
from service.store.models import Team, Trial
from tests.service.utils import spec as quick_spec
from worker.contract.spec import JobSpec

MEASURED = json.loads((Path(__file__).resolve().parents[2] / "research/results/memory_h200.json").read_text())


def test_a_measured_cell_is_the_fit_plus_its_margins() -> None:
    entry = default_table().entries[("minilm-l6", "smart", "fp32")]
    found = estimate_memory_mb("minilm-l6", "smart", "fp32", 32, 128)
    allocated = entry["weights_mb"] + entry["fixed_mb"] + 32 * 128 * (entry["per_token_mb"] +
        entry["per_token_seq_mb"] * 128) + entry["max_residual_mb"]  # fmt: skip
    assert found.basis == "measured" and found.allocated_mb == pytest.approx(allocated)
    assert found.mb == math.ceil(allocated * ALLOCATOR_RESERVE + CUDA_CONTEXT_MB)
    assert found.entry["device"] == "NVIDIA H200" and "memory_h200" in found.entry["source"]


@pytest.mark.parametrize(
    "row",
    MEASURED["rows"],
    ids=lambda r: f"{r['model']}-{r['method']}-{r['batch_size']}-{r['seq_len']}-{r['precision']}",
)
def test_no_estimate_reads_below_what_the_h200_measured(row: dict) -> None:
    name = {"bert-base": "bert-base-uncased"}.get(row["model"], row["model"])
    found = estimate_memory_mb(name, row["method"], row["precision"], row["batch_size"], row["seq_len"])
    assert found.allocated_mb >= row["weights_mb"] + row["peak_mb"] - 0.5
    assert found.allocated_mb <= (row["weights_mb"] + row["peak_mb"]) * 1.15  # and not far above


def test_precision_auto_is_bf16_except_on_gpus_without_it() -> None:
    bf16 = estimate_memory_mb("bert-base-uncased", "vanilla", "bf16", 32, 512)
    fp32 = estimate_memory_mb("bert-base-uncased", "vanilla", "fp32", 32, 512)
    assert bf16.mb < fp32.mb  # vanilla's activations shrink under autocast ...
    smart = [estimate_memory_mb("bert-base-uncased", "smart", p, 32, 512).mb for p in ("fp32", "bf16")]
    assert smart[1] == pytest.approx(smart[0], rel=0.01)  # ... SMART's perturbed forwards leave it
    assert (
        estimate_memory_mb(
            "bert-base-uncased", "vanilla", "auto", 32, 512, gpu_kind="NVIDIA H100 80GB HBM3"
        ).mb
        == bf16.mb
    )
    on_t4 = estimate_memory_mb("bert-base-uncased", "vanilla", "auto", 32, 512, gpu_kind="Tesla T4")
    assert on_t4.mb == fp32.mb and on_t4.precision == "fp32" and "no bf16" in on_t4.notes[0]
    assert estimate_memory_mb("bert-base-uncased", "vanilla", "fp16", 32, 512).mb == fp32.mb


def test_an_unmeasured_method_is_costed_as_smart() -> None:
    found = estimate_memory_mb("minilm-l6", "freelb", "fp32", 16, 128, optimizer="radam")
    assert found.mb == estimate_memory_mb("minilm-l6", "smart", "fp32", 16, 128).mb
    assert any("freelb" in n for n in found.notes) and not any("radam" in n for n in found.notes)


def test_scaling_minilm_predicts_the_measured_bert_base() -> None:
    """The scaling rule checked on the one pair measured: MiniLM's fits scaled to BERT-base's shape land
    within 12% of BERT-base's measured peaks (10.5% at worst), and the reservation (margins on) covers every one."""
    doc = default_document()
    small = from_document({**doc, "models": {"minilm-l6": doc["models"]["minilm-l6"]},
                           "entries": [e for e in doc["entries"] if e["model"] == "minilm-l6"]})  # fmt: skip
    bert = doc["models"]["bert-base"]
    shape = Shape(bert["params"], bert["hidden"], bert["layers"], bert["heads"], "test")
    for row in (r for r in MEASURED["rows"] if r["model"] == "bert-base"):
        scaled = estimate_memory_mb("some/bert", row["method"], row["precision"], row["batch_size"],
                                    row["seq_len"], shape=shape, table=small)  # fmt: skip
        measured = row["weights_mb"] + row["peak_mb"]
        assert scaled.basis == "scaled" and abs(scaled.allocated_mb / measured - 1) < 0.12, row
        assert scaled.mb >= measured


def test_a_local_checkpoint_is_scaled_by_its_config(tmp_path: Path) -> None:
    config = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
              "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    found = estimate_memory_mb(str(tmp_path), "smart", "fp32", 32, 128)
    assert found.basis == "scaled" and "config.json" in found.notes[-1]
    measured = estimate_memory_mb("bert-base-uncased", "smart", "fp32", 32, 128)
    assert found.mb == pytest.approx(measured.mb, rel=0.01)  # BERT-base's shape: the parameters within 0.1%


def test_the_hub_cache_config_and_the_conservative_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    unknown = estimate_memory_mb("org/big-encoder", "vanilla", "fp32", 32, 128)
    assert unknown.basis == "conservative" and any("355M" in n for n in unknown.notes)
    assert unknown.mb > estimate_memory_mb("bert-base-uncased", "vanilla", "fp32", 32, 128).mb
    snapshot = tmp_path / "models--org--big-encoder" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({"hidden_size": 384, "num_hidden_layers": 6}))
    cached = estimate_memory_mb("org/big-encoder", "vanilla", "fp32", 32, 128)
    assert cached.basis == "scaled" and "hub cache" in cached.notes[-1]
    assert cached.mb < unknown.mb


def test_a_peak_measured_here_corrects_the_estimate_upward_only() -> None:
    key = ("minilm-l6", "smart", "auto", 32, 128)
    base = estimate_memory_mb(*key)
    higher = from_document(default_document(), {key: base.allocated_mb + 1000})
    lower = from_document(default_document(), {key: base.allocated_mb - 1000})
    corrected = estimate_memory_mb(*key, table=higher)
    assert corrected.basis == "measured + corrected" and corrected.allocated_mb == base.allocated_mb + 1000
    assert estimate_memory_mb(*key, table=lower).mb == base.mb


def test_trial_rows_feed_the_peaks_back(tmp_path: Path) -> None:
    db = connect(f"sqlite:///{tmp_path / 'store.db'}")
    migrate(db)
    params = {
        "model": "minilm-l6",
        "method": "smart",
        "precision": "auto",
        "batch_size": "32",
        "max_seq_length": "128",
    }
    with db.write_sessions() as session:
        team = Team(name="t", max_priority=0)
        session.add(team)
        session.flush()
        job = crud.create_job(session=session, team=team, spec=JobSpec.model_validate(quick_spec()), n_trials=4,
                              idempotency_key=None)  # fmt: skip
        session.add_all([
            Trial(job_id=job.id, trial_id="a", attempt=1, state="TERMINATED", params=params, metrics={"gpu_memory_peak_mb": 5000.0}),
            Trial(job_id=job.id, trial_id="b", attempt=1, state="ERROR", error_class="oom", params=params,
                  metrics={"gpu_memory_oom_peak_mb": 7000.0}),
            Trial(job_id=job.id, trial_id="c", attempt=1, state="RUNNING", params=params, metrics={"gpu_memory_peak_mb": 9e9}),
            Trial(job_id=job.id, trial_id="d", attempt=1, state="TERMINATED", params={"model": "x"}, metrics={"gpu_memory_peak_mb": 1.0}),
        ])  # fmt: skip
        session.flush()
        assert memory_peaks(session) == {("minilm-l6", "smart", "auto", 32, 128): 7000.0}
        table = memory.load(session)
        assert estimate_memory_mb("minilm-l6", "smart", "auto", 32, 128, table=table).allocated_mb == 7000.0
    db.dispose()


def test_pin_sets_the_largest_estimate_for_gpu_jobs_only() -> None:
    grid = {"axes": {"batch_size": {"values": [8, 32]}, "max_seq_length": {"values": [128]}}}
    gpu = JobSpec.model_validate(
        quick_spec(model="minilm-l6", method="smart", resources={"gpus": 0.25}, search_space=grid)
    )
    pinned = memory.pin(gpu, gpu_kind=None)
    assert pinned.resources.gpu_memory_mb == estimate_memory_mb("minilm-l6", "smart", "auto", 32, 128).mb
    assert pinned.spec_hash() != gpu.spec_hash() and pinned.trials() == gpu.trials()
    assert JobSpec.model_validate_json(pinned.canonical_json()) == pinned
    given = JobSpec.model_validate(quick_spec(resources={"gpus": 0.5, "gpu_memory_mb": 1234}))
    assert memory.pin(given, gpu_kind=None) is given
    cpu = JobSpec.model_validate(quick_spec())
    assert memory.pin(cpu, gpu_kind=None) is cpu


def _settings(tmp_path: Path, **extra: object) -> Settings:
    return Settings(data_dir=tmp_path, glue_dir=None, **extra)  # type: ignore[arg-type]


def test_the_dry_run_plan_reports_memory_and_packing(tmp_path: Path) -> None:
    spec = JobSpec.model_validate(quick_spec(model="minilm-l6", method="smart", resources={"gpus": 0.1},
                                             training={"batch_size": 32, "max_seq_length": 128}))  # fmt: skip
    table = calibration_table({"entries": []})
    team = Team(name="t", max_priority=0)
    plan = estimate.plan(spec, settings=_settings(tmp_path, gpu_kind="NVIDIA H100 80GB HBM3"),
                         team=team, calibration=table)  # fmt: skip
    mb = estimate_memory_mb("minilm-l6", "smart", "auto", 32, 128).mb
    assert plan["memory"]["per_trial_mb"] == mb and plan["memory"]["basis"] == "estimate"
    assert plan["memory"]["gpu_memory_mb"] == math.floor(80e9 / 2**20)
    fraction = math.ceil(mb / plan["memory"]["gpu_memory_mb"] * 16) / 16
    assert plan["memory"]["gpu_fraction"] == max(0.1, fraction)
    assert plan["memory"]["trials_per_gpu"] == int(1 // plan["memory"]["gpu_fraction"])
    assert plan["groups"][0]["memory"]["mb"] == mb
    unknown = estimate.plan(spec, settings=_settings(tmp_path), team=team, calibration=table)
    assert unknown["memory"]["gpu_fraction"] is None and "advertise" in unknown["memory"]["note"]
    cpu = JobSpec.model_validate(quick_spec())
    assert estimate.plan(cpu, settings=_settings(tmp_path), team=team, calibration=table)["memory"] is None


@pytest.mark.parametrize(
    ("kind", "mib"),
    [("NVIDIA H100 80GB HBM3", 76293), ("NVIDIA H200", 134468), ("NVIDIA A100-SXM4-40GB", 38146), ("Tesla T4", 15258),
     (None, None), ("Some GPU", None)],
)  # fmt: skip
def test_nominal_gpu_memory(kind: str | None, mib: int | None) -> None:
    assert memory.gpu_memory_of(kind) == mib


@pytest.mark.usefixtures("starts_processes")  # the probe runs as a script
def test_the_embedded_head_advertises_what_torch_reads(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text(f"#!{sys.executable}\nprint('[81559, 81559]')\n")
    fake.chmod(0o755)
    assert gpu_memory_mb(None, python=str(fake)) == 2 * 81559
    assert gpu_memory_mb(1, python=str(fake)) == 81559
    assert gpu_memory_mb(0, python=str(fake)) is None
    broken = tmp_path / "broken"
    broken.write_text(f"#!{sys.executable}\nraise SystemExit(1)\n")
    broken.chmod(0o755)
    assert gpu_memory_mb(None, python=str(broken)) is None
    assert gpu_memory_mb(None, python=str(tmp_path / "missing")) is None
    assert resource_args(None, "--resources='{\"x\": 1}'") == []  # the operator's own wins
