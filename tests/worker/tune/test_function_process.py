"""A custom function in its own process (worker.tune.function_process, worker.tune.function_child): the
environment it gets (no secrets), the messages it exchanges, and, with real child processes running the
functions of tests/support/user_functions.py, its epochs, failures, exits and what it can see."""

from __future__ import annotations

import contextlib
import io
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import user_functions
from worker.contract.errors import UserFunctionError, classify, diagnose
from worker.tune.function_process import ended, function_environment, run_in_child
from worker.tune.function_protocol import (
    Done,
    Failed,
    FunctionJob,
    ProtocolError,
    Report,
    decode,
    encode,
    parse_child,
    parse_reply,
)
from worker.tune.user_function import PROGRESS_FILE, Reporter

REPO = Path(__file__).resolve().parents[3]


def test_the_functions_environment_keeps_what_it_needs_and_drops_every_secret() -> None:
    environ = {
        "PATH": "/usr/bin", "PYTHONPATH": "/repo", "CUDA_VISIBLE_DEVICES": "0", "HF_HUB_OFFLINE": "1",
        "SMARTUNE_DATA_ROOTS": "/data", "SMARTUNE_GLUE_DIR": "/glue", "OMP_NUM_THREADS": "2",
        "MKL_NUM_THREADS": "2", "AWS_DEFAULT_REGION": "us-east-1", "MLFLOW_TRACKING_URI": "http://mlflow:5000",
        "RAY_AUTH_TOKEN": "t", "RAY_AUTH_TOKEN_PATH": "/t", "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "s", "AWS_ENDPOINT_URL": "http://minio:9000",
        "MLFLOW_TRACKING_USERNAME": "team", "MLFLOW_TRACKING_PASSWORD": "p", "MLFLOW_TRACKING_TOKEN": "t",
        "SMARTUNE_API_KEY": "k", "WEBHOOK_SECRET": "s", "GOOGLE_APPLICATION_CREDENTIALS": "/c.json",
        "HF_TOKEN": "t", "db_password": "p", "STORE_URL": "postgresql://smartune:hunter2@db/smartune",
    }  # fmt: skip
    kept = function_environment(environ)
    assert kept == {
        "PATH": "/usr/bin", "PYTHONPATH": "/repo", "CUDA_VISIBLE_DEVICES": "0", "HF_HUB_OFFLINE": "1",
        "SMARTUNE_DATA_ROOTS": "/data", "SMARTUNE_GLUE_DIR": "/glue", "OMP_NUM_THREADS": "2",
        "MKL_NUM_THREADS": "2", "AWS_DEFAULT_REGION": "us-east-1", "MLFLOW_TRACKING_URI": "http://mlflow:5000",
        "PYTHONUNBUFFERED": "1",
    }  # fmt: skip
    assert environ["RAY_AUTH_TOKEN"] == "t"  # pure: the trial's own environment is not touched


def test_the_messages_parse_and_garbage_is_refused() -> None:
    assert parse_child(encode({"report": {"accuracy": 0.5}, "checkpoint_dir": "/tmp/c"})) == Report(
        {"accuracy": 0.5}, Path("/tmp/c")
    )
    diverged = parse_child(encode({"report": {"loss": float("nan")}, "checkpoint_dir": None}))
    assert (
        isinstance(diverged, Report)
        and diverged.checkpoint_dir is None
        and math.isnan(diverged.metrics["loss"])
    )
    assert parse_child(encode({"done": True})) == Done()
    assert parse_child(encode({"error": "ValueError: x", "oom": True})) == Failed("ValueError: x", True)
    assert parse_reply(encode({"ok": True})) is None
    assert parse_reply(encode({"error": "lacks the metric"})) == "lacks the metric"
    for line in (b"hello", b"[1]", encode({"report": [1]}), encode({"what": 1})):
        with pytest.raises(ProtocolError):
            parse_child(line)
    job = FunctionJob("m:f", {"seed": 1}, ["/data"], None, 1, True, 1, ["/repo"])
    assert FunctionJob.from_message(decode(encode(job.message()))) == job
    with pytest.raises(ProtocolError):
        FunctionJob.from_message({"done": True})


def test_a_child_that_ends_without_a_word_is_described() -> None:
    assert ended(3) == "the function's process ended with exit code 3"
    assert ended(-9) == "the function's process was killed by signal SIGKILL"


# --- real child processes -----------------------------------------------------------------------------


class Trial:
    """The trial's side: a Reporter whose epochs land in lists instead of Tune and MLflow."""

    def __init__(self, metric: str = "accuracy", checkpoint: Path | None = None) -> None:
        self.sent: list[tuple[dict[str, float], Path | None]] = []
        self.logged: list[int] = []
        self.reporter = Reporter(
            metric,
            "max",
            lambda m, f: self.sent.append((m, f)),
            lambda _m, e: self.logged.append(e),
            checkpoint,
        )


def job(name: str, tmp_path: Path) -> FunctionJob:
    """`name` of tests/support/user_functions.py, seed 3, deterministic, one thread, tmp_path its root."""
    config = {"seed": 3, "epochs": 2, "folder": str(tmp_path)}
    entrypoint = f"tests.support.user_functions:{name}"
    return FunctionJob(entrypoint, config, [str(tmp_path)], None, 3, True, 1, list(sys.path))


@contextlib.contextmanager
def captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """The trial's sys.stdout and sys.stderr (what worker.tune.trial_output tees), set in the test's body:
    pytest sets its own again between a fixture's set-up and the test."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield out, err


def test_the_function_reports_its_epochs_through_the_trial_and_its_prints_reach_the_trials_output(
    starts_processes: None, tmp_path: Path
) -> None:
    trial = Trial()
    with captured() as (out, err):
        run_in_child(job("two_epochs", tmp_path), trial.reporter)
    assert trial.logged == [1, 2]
    assert [m["best_score"] for m, _ in trial.sent] == [0.5, 0.6]
    assert [f for _, f in trial.sent] == [tmp_path / "epoch-1", tmp_path / "epoch-2"]
    assert (tmp_path / "epoch-2" / PROGRESS_FILE).is_file()  # written by the trial's Reporter
    assert "epochs for seed 3" in out.getvalue()
    assert f"roots ['{tmp_path}']" in err.getvalue()


def test_what_the_function_raises_is_the_users_and_a_refused_report_is_raised_in_it(
    starts_processes: None, tmp_path: Path
) -> None:
    trial = Trial()
    with captured() as (_, err), pytest.raises(UserFunctionError) as info:
        run_in_child(job("raises", tmp_path), trial.reporter)
    assert 'user_functions.py", line' in err.getvalue()  # the user's traceback, in the trial's log
    assert diagnose(info.value) == (
        "user",
        "UserFunctionError: ValueError: features must be at least 1, got 0",
    )
    assert trial.logged == [1]

    refused = Trial()
    with captured() as (out, _):
        run_in_child(job("lacks_the_metric", tmp_path), refused.reporter)
    assert refused.logged == [1] and "refused: reported metrics ['loss'] lack" in out.getvalue()

    with pytest.raises(UserFunctionError) as info:
        run_in_child(job("no_such_function", tmp_path), Trial().reporter)
    assert str(info.value).startswith("cannot load tests.support.user_functions:no_such_function: Attr")

    with pytest.raises(UserFunctionError) as info:
        run_in_child(job("out_of_memory", tmp_path), Trial().reporter)
    assert classify(info.value) == "oom"


def test_a_function_whose_process_exits_fails_the_trial_as_the_users(
    starts_processes: None, tmp_path: Path
) -> None:
    trial = Trial()
    with pytest.raises(UserFunctionError, match="^the function's process ended with exit code 3$") as info:
        run_in_child(job("exits", tmp_path), trial.reporter)
    assert classify(info.value) == "user" and trial.logged == [1]


def test_a_trial_stopped_while_the_function_runs_kills_its_process(
    starts_processes: None, tmp_path: Path
) -> None:
    class Stopped(BaseException):  # as Tune stops a trial: not an Exception
        pass

    def send(_metrics: dict[str, float], _folder: Path | None) -> None:
        raise Stopped

    with pytest.raises(Stopped):
        run_in_child(job("two_epochs", tmp_path), Reporter("accuracy", "max", send, lambda _m, _e: None))
    assert not (tmp_path / "epoch-2").exists()  # the child did not go on to its second epoch


def test_the_function_sees_none_of_the_nodes_secrets(
    starts_processes: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in user_functions.SECRET_NAMES:
        monkeypatch.setenv(name, "fake-secret")
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH") or str(REPO))
    monkeypatch.setenv("SMARTUNE_DATA_ROOTS", str(tmp_path))
    trial = Trial()
    run_in_child(job("environment", tmp_path), trial.reporter)
    seen = trial.sent[0][0]
    assert {name for name in user_functions.SECRET_NAMES if seen[f"sees_{name}"]} == set()
    assert all(seen[f"sees_{name}"] == 1.0 for name in user_functions.NEEDED_NAMES)
