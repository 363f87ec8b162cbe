"""What a trial reports per epoch: `score` is what chooses (dev, or the held-out validation rows), and with
validation rows their metrics are `val_*` and the dev score at the chosen epoch is `dev_score_at_best`."""

from __future__ import annotations

from typing import Any

from worker.tune.epoch_report import epoch_metrics


def _record(epoch: int, dev: float, val: float | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {"epoch": epoch, "metrics": {"accuracy": dev}, "train_loss": 0.5,
                              "components": {"loss": 0.5, "r_s": 0.1}, "train_seconds": 1.0, "examples_per_s": 9.0}  # fmt: skip
    if val is not None:
        record["validation"] = {"accuracy": val}
    return record


def test_without_validation_rows_dev_is_the_score_as_before() -> None:
    best, now = _record(1, 0.8), _record(2, 0.7)
    metrics = epoch_metrics(now, "accuracy", best)
    assert metrics["score"] == 0.7 and metrics["best_score"] == 0.8 and metrics["eval_accuracy"] == 0.7
    assert metrics["train_r_s"] == 0.1 and not [k for k in metrics if k.startswith("val_")]
    assert "dev_score_at_best" not in metrics


def test_with_validation_rows_they_are_the_score_and_dev_is_reported_at_the_chosen_epoch() -> None:
    best, now = _record(1, 0.6, val=0.9), _record(2, 0.8, val=0.7)
    metrics = epoch_metrics(now, "accuracy", best)
    assert metrics["score"] == 0.7 and metrics["best_score"] == 0.9  # what Tune optimises and ASHA stops by
    assert metrics["val_accuracy"] == 0.7 and metrics["eval_accuracy"] == 0.8
    assert metrics["dev_score_at_best"] == 0.6  # dev at epoch 1, the chosen one, not dev's own best
