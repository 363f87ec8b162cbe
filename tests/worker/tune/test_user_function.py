"""A custom function's side of a trial (worker.tune.user_function), with a fake Tune behind the reporter's
`send`: epochs numbered as the built-in loop numbers them, `score`/`best_score` for max and min, checkpoints
that carry the epoch across a restart, and every failure of the user's code as class `user`."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from worker.contract.errors import NON_RETRYABLE, StorageError, UserFunctionError, classify, diagnose
from worker.contract.trial import TrainConfig
from worker.tune.user_function import PROGRESS_FILE, Reporter, call_function, load_function, user_config


class FakeTune:
    """Stands in for Tune (`send`) and the trial's MLflow run (`log`)."""

    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, float], Path | None]] = []
        self.logged: list[tuple[int, dict[str, float]]] = []

    def reporter(
        self, metric: str = "accuracy", mode: str = "max", checkpoint: Path | None = None
    ) -> Reporter:
        return Reporter(metric, mode, lambda m, f: self.sent.append((m, f)), lambda m, e: self.logged.append((e, m)),
                        checkpoint)  # fmt: skip


def test_each_report_is_an_epoch_with_its_score_and_best_score() -> None:
    fake = FakeTune()
    reporter = fake.reporter()
    for accuracy in (0.5, 0.75, 0.6):
        reporter.report({"accuracy": accuracy, "loss": 1 - accuracy})
    assert [e for e, _ in fake.logged] == [1, 2, 3]
    assert [m["best_score"] for m, _ in fake.sent] == [0.5, 0.75, 0.75]
    assert fake.sent[2][0] == {"accuracy": 0.6, "loss": 0.4, "epoch": 3.0, "score": 0.6, "best_score": 0.75}


def test_a_minimised_metric_is_scored_by_its_negation() -> None:
    fake = FakeTune()
    reporter = fake.reporter("loss", "min")
    reporter.report({"loss": 0.4})
    reporter.report({"loss": 0.2})
    assert [(m["score"], m["best_score"]) for m, _ in fake.sent] == [(-0.4, -0.4), (-0.2, -0.2)]


@pytest.mark.parametrize(
    ("metrics", "message"),
    [({"loss": 1.0}, "lack the sweep's metric 'accuracy'"), ({"accuracy": "high"}, "is not a number"),
     ({"accuracy": True}, "is not a number")],
)  # fmt: skip
def test_a_report_the_sweep_cannot_use_fails_the_trial_as_the_users(
    metrics: dict[str, Any], message: str
) -> None:
    def fn(config: dict[str, Any], reporter: Reporter, roots: list[Path]) -> None:
        reporter.report(metrics)

    with pytest.raises(UserFunctionError, match=message) as info:
        call_function(fn, {}, FakeTune().reporter(), [])
    assert classify(info.value) == "user"


def test_a_checkpoint_carries_the_epoch_and_best_across_a_restart(tmp_path: Path) -> None:
    fake = FakeTune()
    first = fake.reporter()
    first.report({"accuracy": 0.9}, checkpoint_dir=tmp_path)
    assert fake.sent[0][1] == tmp_path and (tmp_path / PROGRESS_FILE).is_file()
    again = fake.reporter(checkpoint=tmp_path)  # Tune hands the folder back to the restarted trial
    assert again.checkpoint == tmp_path and again.epoch == 1
    again.report({"accuracy": 0.8})
    assert fake.sent[-1][0]["epoch"] == 2.0 and fake.sent[-1][0]["best_score"] == 0.9


def test_what_the_function_raises_is_a_one_line_user_failure_that_is_not_retried() -> None:
    def fn(config: dict[str, Any], reporter: Reporter, roots: list[Path]) -> None:
        raise ValueError("lr\n  missing")

    with pytest.raises(UserFunctionError) as info:
        call_function(fn, {}, FakeTune().reporter(), [])
    assert diagnose(info.value) == ("user", "UserFunctionError: ValueError: lr missing")
    assert "user" in NON_RETRYABLE
    shipped = pickle.loads(pickle.dumps(info.value))  # across Ray processes, without the user's cause
    assert (
        classify(shipped) == "user"
        and classify(None, f"RayTaskError: UserFunctionError: {shipped}") == "user"
    )


def test_running_out_of_memory_in_the_function_stays_oom() -> None:
    def fn(config: dict[str, Any], reporter: Reporter, roots: list[Path]) -> None:
        raise MemoryError

    with pytest.raises(UserFunctionError) as info:
        call_function(fn, {}, FakeTune().reporter(), [])
    assert classify(info.value) == "oom"


def test_the_trials_own_storage_failure_is_not_the_users() -> None:
    def fn(config: dict[str, Any], reporter: Reporter, roots: list[Path]) -> None:
        raise StorageError("could not write the epoch 1 checkpoint: no space left on device (ENOSPC)")

    with pytest.raises(StorageError):
        call_function(fn, {}, FakeTune().reporter(), [])


@pytest.mark.parametrize(
    ("entrypoint", "why"),
    [("no_such_module_here:fn", "ModuleNotFoundError"), ("json:no_such_function", "AttributeError"),
     ("json:__name__", "is not callable")],
)  # fmt: skip
def test_a_function_that_cannot_be_loaded_says_why(entrypoint: str, why: str) -> None:
    with pytest.raises(UserFunctionError, match=why) as info:
        load_function(entrypoint)
    assert classify(info.value) == "user" and entrypoint in str(info.value)


def test_the_function_gets_the_trial_fields_and_its_own_values() -> None:
    config = TrainConfig.from_dict({"seed": 7, "epochs": 2, "method_params": {"lambda_s": 3.0}})
    values = user_config(config, {"features": 16})
    assert values["seed"] == 7 and values["epochs"] == 2 and values["lambda_s"] == 3.0
    assert values["features"] == 16 and "method_params" not in values
