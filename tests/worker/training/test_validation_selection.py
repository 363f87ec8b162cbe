"""Selection apart from reporting: with `validation_fraction`, held-out training rows choose the best epoch
and dev is reported at that epoch; without it, dev chooses as before."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from worker.contract.trial import TrainConfig
from worker.training import finetune
from worker.training.finetune import best_record, run_training, selection_value
from worker.training.session import TrainingSession


def _folder(tmp_path: Path) -> Path:
    """A tiny SST-2-shaped upload: train.jsonl and dev.jsonl, no source column."""
    for split, rows in (("train", 40), ("dev", 12)):
        lines = [
            json.dumps({"sentence": f"{'good' if i % 2 else 'bad'} film {i}", "label": i % 2})
            for i in range(rows)
        ]
        (tmp_path / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path


def _config(data: Path, **kw: Any) -> TrainConfig:
    base = {"task": "sst2", "data": str(data), "model": "tiny-random", "method": "vanilla", "epochs": 3,
            "batch_size": 8, "max_seq_length": 32, "learning_rate": 1e-3}  # fmt: skip
    return TrainConfig(**{**base, **kw})  # type: ignore[arg-type]


def test_a_run_with_held_out_rows_evaluates_them_every_epoch_and_records_which_rows(tmp_path: Path) -> None:
    result = run_training(_config(_folder(tmp_path), validation_fraction=0.25), None)
    assert result["train_examples"] == 30 and result["validation_examples"] == 10
    assert all(set(r["validation"]) == {"accuracy"} for r in result["epochs"])
    assert (
        result["selected_on"] == "validation"
        and result["best_validation"] == result["epochs"][result["best_epoch"] - 1]["validation"]
    )
    provenance = result["provenance"]
    assert len(provenance["train_rows_sha256"]) == len(provenance["validation_rows_sha256"]) == 64
    plain = run_training(_config(_folder(tmp_path), epochs=1), None)
    assert (
        plain["selected_on"] == "dev" and "best_validation" not in plain and plain["validation_examples"] == 0
    )
    assert "validation" not in plain["epochs"][0] and "validation_rows_sha256" not in plain["provenance"]
    assert plain["provenance"]["train_rows_sha256"] != provenance["train_rows_sha256"]  # 40 rows, not 30


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each epoch's dev and validation accuracy from a script, where dev and validation disagree."""
    dev: Iterator[float] = iter([0.5, 0.9, 0.6])
    val: Iterator[float] = iter([0.7, 0.6, 0.8])

    def validation(session: TrainingSession) -> dict[str, float] | None:
        return {"accuracy": next(val)} if session.validation is not None else None

    monkeypatch.setattr(finetune, "evaluate", lambda _session: {"accuracy": next(dev)})
    monkeypatch.setattr(finetune, "evaluate_validation", validation)
    yield


@pytest.mark.usefixtures("scripted")
def test_the_validation_rows_choose_the_epoch_and_dev_is_reported_at_it(tmp_path: Path) -> None:
    result = run_training(_config(_folder(tmp_path), validation_fraction=0.25), None)
    assert result["best_epoch"] == 3  # validation 0.8, although dev peaked at epoch 2
    assert result["best"] == {"accuracy": 0.6} and result["best_validation"] == {"accuracy": 0.8}
    assert best_record(result["epochs"], "accuracy") == result["epochs"][2]


@pytest.mark.usefixtures("scripted")
def test_without_held_out_rows_dev_chooses_as_before(tmp_path: Path) -> None:
    result = run_training(_config(_folder(tmp_path)), None)
    assert result["best_epoch"] == 2 and result["best"] == {"accuracy": 0.9}


def test_the_selection_value() -> None:
    assert selection_value({"metrics": {"f1": 0.5}}, "f1") == 0.5
    assert selection_value({"metrics": {"f1": 0.5}, "validation": {"f1": 0.25}}, "f1") == 0.25
    records = [
        {"metrics": {"f1": 0.9}, "validation": {"f1": 0.1}},
        {"metrics": {"f1": 0.1}, "validation": {"f1": 0.2}},
    ]
    assert best_record(records, "f1") is records[1] and best_record([], "f1") is None
