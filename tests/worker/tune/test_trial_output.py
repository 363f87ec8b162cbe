"""What a trial prints, kept on its run (worker/tune/trial_output.py) and read back by the control plane
(service/engine/run_files.py) from a real MLflow store (SQLite, in-process): the output still reaches the
process's own streams, the kept tail is bounded and starts on a whole line, a running trial's output is
logged again while it runs, a failure's traceback is kept, each start of a trial has its own file."""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from service.engine.tracking import MlflowTracker
from worker.contract.tags import ATTEMPT, JOB, PARENT, TRIAL, output_file
from worker.tune.trial_output import OutputTail, Tee, kept_output


def test_the_tail_keeps_the_newest_bytes_from_a_whole_line() -> None:
    tail = OutputTail(max_bytes=30)
    for i in range(10):
        tail.add(f"line {i}\n")  # 7 bytes each
    assert tail.text() == "line 6\nline 7\nline 8\nline 9\n" and tail.dropped
    tail.add("partial line 1\npartial line 2")  # 29 bytes: the earlier lines go
    tail.add("3\n")  # the front is cut inside a line: shown from the next whole one
    assert tail.text() == "partial line 23\n"
    tail.add("é" * 40)  # one write larger than the whole tail: its end, in whole characters
    assert tail.text() == "é" * 15 and len(tail.text().encode()) == 30


def test_a_tee_writes_through_and_delegates() -> None:
    stream, tail = io.StringIO(), OutputTail()
    tee = Tee(stream, tail)  # type: ignore[arg-type]
    assert tee.write("hello\n") == 6
    tee.flush()
    assert stream.getvalue() == "hello\n" == tail.text()
    assert tee.getvalue() == "hello\n"  # anything else is the stream's


@pytest.fixture
def store(tmp_path: Path) -> tuple[MlflowTracker, MlflowClient, str]:
    tracker = MlflowTracker(
        f"sqlite:///{tmp_path / 'mlflow.db'}", "smartune-nlp", str(tmp_path / "artifacts")
    )
    experiment_id = tracker.ensure_experiment()
    assert experiment_id is not None
    client = tracker.client
    parent = client.create_run(experiment_id, tags={JOB: "job-1", ATTEMPT: "1"}).info.run_id
    tags = {PARENT: parent, JOB: "job-1", TRIAL: "t1", ATTEMPT: "1"}
    return tracker, client, client.create_run(experiment_id, tags=tags).info.run_id


def test_a_trials_output_is_kept_on_its_run_and_read_back(
    store: tuple[MlflowTracker, MlflowClient, str], capsys: pytest.CaptureFixture[str]
) -> None:
    tracker, client, run_id = store
    with kept_output(client, run_id, start=1, interval_s=0.2):
        print("trial t1: start 1 at /srv/data")  # noqa: T201 - what a trial prints
        sys.stderr.write("a warning\n")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not client.list_artifacts(run_id, "output"):
            time.sleep(0.1)
        running = tracker.trial_output("job-1", "t1", 1000)
        assert running is not None and running.running and "trial t1: start 1" in running.text
    assert "trial t1: start 1" in capsys.readouterr().out  # still printed where it went
    assert sys.stdout is not None and not isinstance(sys.stdout, Tee)  # the streams are put back

    with pytest.raises(ValueError, match="bad batch"), kept_output(client, run_id, start=2, interval_s=60):
        print("second start")  # noqa: T201
        raise ValueError("bad batch")
    client.set_terminated(run_id)
    output = tracker.trial_output("job-1", "t1", 100_000)
    assert output is not None and output.starts == [1, 2] and not output.running and not output.truncated
    first, second = output.text.split("--- start 2 ---\n")
    assert first == "--- start 1 ---\ntrial t1: start 1 at /srv/data\na warning\n"
    assert second.startswith("second start\nTraceback") and "ValueError: bad batch" in second
    assert {f.path for f in client.list_artifacts(run_id, "output")} == {output_file(1), output_file(2)}

    short = tracker.trial_output("job-1", "t1", 40)  # the newest bytes only, from a whole line
    assert short is not None and short.truncated and short.starts == [2]
    assert short.text.startswith("--- start 2 ---\n") and short.text.endswith("ValueError: bad batch\n")
    assert tracker.trial_output("job-1", "t9", 100) is None  # no such trial
