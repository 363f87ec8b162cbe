"""The estimator (service.costs): dedupe, examples per epoch, calibration fallbacks, ASHA's expectation, and
the calibration refreshed from a finished trial."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.config import Settings
from service.costs import asha, calibration, estimate, refresh, sizes
from service.costs.calibration import Entry, from_document
from service.engine.tracking import TrialRun
from service.store.db import connect, migrate
from service.store.models import CalibrationRow, Team, Trial
from tests.service.utils import spec as quick_spec
from worker.contract.spec import JobSpec

TABLE = from_document(
    {
        "entries": [
            {"model": "m", "method": "vanilla", "max_seq_length": 64, "device": "cpu", "train_s_per_example": 0.01},
            {"model": "m", "method": "vanilla", "max_seq_length": 256, "device": "cpu", "train_s_per_example": 0.04},
            {"model": "m", "method": "smart", "max_seq_length": 64, "device": "cpu", "train_s_per_example": 0.03},
            {"model": "m", "method": "vanilla", "max_seq_length": 64, "device": "NVIDIA X", "train_s_per_example": 0.001},
        ],
        "method_ratios": {"vanilla": 1.0, "smart": 3.0, "r3f": 2.0},
        "eval_ratio": 0.5,
        "trial_overhead_s": {"m": 10.0, "*": 20.0},
    }
)  # fmt: skip


def test_the_exact_key_needs_no_fallback() -> None:
    match = TABLE.lookup("m", "smart", 64, "cpu")
    assert match is not None and match.fallback is None
    assert match.train_s_per_example == 0.03
    assert match.eval_s_per_example == pytest.approx(0.01 * 0.5)  # vanilla's cost x eval_ratio


def test_fallbacks_are_named() -> None:
    near = TABLE.lookup("m", "smart", 100, "cpu")  # measured at 64 tokens: scaled by the length
    assert near is not None and near.fallback == "nearest max_seq_length 64, scaled x1.56 by length"
    assert near.train_s_per_example == pytest.approx(0.03 * 100 / 64)
    ratio = TABLE.lookup("m", "r3f", 200, "cpu")
    assert ratio is not None and ratio.train_s_per_example == pytest.approx(0.04 * 200 / 256 * 2.0)
    assert (
        ratio.fallback
        == "vanilla x method cost ratio 2.00 (nearest max_seq_length 256, scaled x0.78 by length)"
    )
    gpu = TABLE.lookup("m", "vanilla", 64, calibration.ANY_GPU)
    assert gpu is not None and "NVIDIA X" in (gpu.fallback or "")
    assert TABLE.lookup("other-model", "vanilla", 64, "cpu") is None
    assert TABLE.lookup("m", "freelb", 64, "cpu") is None  # no ratio for it


def test_the_packaged_default_says_where_each_number_comes_from() -> None:
    document = json.loads(calibration.DEFAULT_PATH.read_text())
    assert document["entries"] and all(e["source"] for e in document["entries"])
    table = from_document(document)
    assert table.lookup("minilm-l6", "smart", 64, "cpu") is not None


def test_rows_of_the_store_replace_the_default_entry() -> None:
    row = Entry("m", "smart", 64, "cpu", 0.05, source="measured here")
    table = from_document({"entries": [{"model": "m", "method": "smart", "max_seq_length": 64, "device": "cpu",
                                        "train_s_per_example": 0.03}]}, [row])  # fmt: skip
    assert table.lookup("m", "smart", 64, "cpu").train_s_per_example == 0.05  # type: ignore[union-attr]


def test_examples_per_epoch(tmp_path: Path) -> None:
    assert sizes.train_examples("rte", None, None, None, 1.0) == sizes.Size(2490, "GLUE's published size")
    capped = sizes.train_examples("rte", None, None, 100, 0.5)
    assert capped.rows == 50 and "train_fraction 0.5" in capped.basis and "max_train_samples" in capped.basis
    assert sizes.eval_examples("mnli", None, None, None).rows == 9815 + 9832
    assert sizes.eval_examples("mnli", None, None, 100).rows == 200
    (tmp_path / "RTE").mkdir()
    (tmp_path / "RTE" / "train.tsv").write_text(
        "index\tsentence1\tsentence2\tlabel\n" + "0\ta\tb\tentailment\n" * 7
    )
    counted = sizes.train_examples("rte", str(tmp_path), None, None, 1.0)
    assert counted.rows == 7 and "train.tsv" in counted.basis
    hub = sizes.train_examples("rte", "org/dataset", None, None, 1.0)
    assert hub.rows is None and "hub dataset" in hub.basis
    assert sizes.train_examples("rte", "org/dataset", None, 64, 1.0).rows == 64  # an upper bound, said so
    assert sizes.train_examples("snli", None, None, None, 1.0).rows is None


def test_held_out_validation_rows_are_not_trained_on() -> None:
    held = sizes.train_examples("rte", None, None, 1000, 1.0, validation_fraction=0.1)
    assert held.rows == 900 and "less validation_fraction 0.1" in held.basis
    assert sizes.train_examples("rte", None, None, 1000, 1.0, 0.0).rows == 1000
    assert [sizes.held_out(n, 0.5) for n in (1, 2, 3)] == [0, 1, 2]  # at least one row held, one left


def test_asha_expectation() -> None:
    assert asha.rungs(6, 1, 2) == [1, 2, 4]
    assert asha.pass_fraction(1, 2) == 1.0  # the first to arrive always goes on
    assert asha.pass_fraction(2, 2) == pytest.approx(0.75)
    assert asha.pass_fraction(10_000, 3) == pytest.approx(1 / 3, abs=2e-3)
    assert asha.expected_epochs(8, 2, 2, 1, 2) == pytest.approx(1 + 4.5 / 8)
    assert asha.expected_epochs(8, 1, 1, 1, 2) == 1  # no rung below max_t: nothing stops
    assert asha.expected_epochs(1, 6, 6, 1, 2) == 6  # alone, a trial always goes on


def _settings(tmp_path: Path, **extra: object) -> Settings:
    return Settings(data_dir=tmp_path, glue_dir=None, **extra)  # type: ignore[arg-type]


def test_plan_dedupes_and_prices_trials(tmp_path: Path) -> None:
    document = quick_spec(
        model="minilm-l6",
        method="vanilla",
        training={"epochs": 2, "max_seq_length": 64, "max_train_samples": 100, "max_eval_samples": 20},
        # lambda_s is ignored by vanilla: 2 x 2 grid cells are 2 trials after deduplication
        search_space={
            "axes": {"learning_rate": {"values": [1e-4, 5e-4]}, "lambda_s": {"values": [1.0, 3.0]}}
        },
        search={"num_samples": 1, "asha": {"grace_period": 1, "reduction_factor": 2}},
        limits={"max_concurrent_trials": 1},
    )
    spec = JobSpec.model_validate(document)
    plan = estimate.plan(spec, settings=_settings(tmp_path), team=Team(name="t", max_priority=0),
                         calibration=TABLE_WITH_MINILM)  # fmt: skip
    assert plan["trials"] == 2 and len(plan["groups"]) == 1
    group = plan["groups"][0]
    assert (group["train_examples"], group["eval_examples"]) == (100, 20)
    epoch = 100 * 0.02 + 20 * 0.02 * 0.5
    assert group["seconds_per_trial"] == pytest.approx(30.0 + 2 * epoch)
    assert plan["unit"] == "cpu-hours" and plan["device_hours"] == pytest.approx(2 * (30 + 2 * epoch) / 3600)
    assert plan["wall_hours"] == pytest.approx(plan["trial_hours"])  # one at a time
    assert plan["asha"]["expected_epoch_fraction"] == pytest.approx(asha.expected_epochs(2, 2, 2, 1, 2) / 2)
    assert plan["asha"]["expected_device_hours"] < plan["device_hours"]


def test_plan_says_why_it_cannot_price(tmp_path: Path) -> None:
    spec = JobSpec.model_validate(quick_spec(model="tiny-random"))
    plan = estimate.plan(spec, settings=_settings(tmp_path), team=Team(name="t", max_priority=0),
                         calibration=TABLE_WITH_MINILM)  # fmt: skip
    assert plan["device_hours"] is None and "tiny-random" in plan["unknown"][0]


TABLE_WITH_MINILM = from_document(
    {"entries": [{"model": "minilm-l6", "method": "vanilla", "max_seq_length": 64, "device": "cpu",
                  "train_s_per_example": 0.02, "threads": 1}],
     "eval_ratio": 0.5, "trial_overhead_s": {"*": 30.0}}
)  # fmt: skip


def test_a_finished_trial_refreshes_the_table(tmp_path: Path) -> None:
    db = connect(f"sqlite:///{tmp_path / 'store.db'}")
    migrate(db)
    run = TrialRun(trial_id="t1", run_id="r", attempt=1, state="TERMINATED",
                   metrics={"mean_examples_per_s": 50.0}, device="cpu", threads=2, workers=1,
                   config={"model": "m", "method": "smart", "max_seq_length": 64, "batch_size": 16})  # fmt: skip
    with db.write_sessions() as session:
        row = Trial(job_id="j", trial_id="t1", attempt=1, state="TERMINATED", params={}, metrics={})
        assert refresh.learn(session, row, run) is True
        assert refresh.learn(session, row, run) is False  # once per trial
        other = Trial(job_id="j", trial_id="t2", attempt=1, state="TERMINATED", params={}, metrics={})
        run.metrics = {"mean_examples_per_s": 25.0}
        assert refresh.learn(session, other, run) is True
        session.flush()
        table = calibration.load(session)
        entry = session.query(CalibrationRow).one()
        assert entry.samples == 2 and entry.train_s_per_example == pytest.approx((0.02 + 0.04) / 2)
        match = table.lookup("m", "smart", 64, "cpu")
        assert match is not None and "measured here" in match.entry.source
        running = TrialRun(trial_id="t3", run_id="r3", attempt=1, state="RUNNING",
                           metrics={"examples_per_s": 9.0}, device="cpu", config=run.config)  # fmt: skip
        assert refresh.measurement(running) is None
    db.dispose()
