"""`status --watch` off a terminal prints a line per change, not per refresh; the estimate counts cells,
seeds and samples as the plan has them."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

import smartune
from cli import client_cmd
from cli.client_cmd import progress_lines
from cli.estimate_view import trial_count
from cli.main import main
from tests.service.utils import QUICK_SPEC


def _job(state: str, running: int = 0) -> dict[str, Any]:
    by_state = {"RUNNING": running} if running else {}
    return {"id": "job-1", "state": state, "progress": {"by_state": by_state, "total": 2}, "trials": [],
            "best_value": None, "wait_reason": None, "transitions": []}  # fmt: skip


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


REFRESHES = [_job("QUEUED")] * 3 + [_job("RUNNING", 1)] * 4 + [_job("RUNNING", 2), _job("SUCCEEDED")]


def test_a_log_gets_one_line_per_change() -> None:
    out = io.StringIO()  # a pipe or a file: not a terminal
    show = progress_lines(out)
    for job in REFRESHES:
        show(job)
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and len(set(lines)) == 4
    assert lines[0].startswith("job-1 QUEUED") and lines[-1].startswith("job-1 SUCCEEDED")


def test_a_terminal_gets_every_refresh() -> None:
    out = Terminal()
    show = progress_lines(out)
    for job in REFRESHES:
        show(job)
    assert len(out.getvalue().splitlines()) == len(REFRESHES)


def _plan(cells: int, seeds: int, samples: int = 1) -> dict[str, Any]:
    return {"trials": cells * samples, "cells": cells, "samples_per_cell": samples, "seeds": seeds}


def test_the_estimate_counts_seeds_apart_from_cells() -> None:
    assert trial_count(_plan(8, 2)) == "4 cells x 2 seeds = 8 trials"
    assert trial_count(_plan(1, 1)) == "1 cell x 1 seed = 1 trial"
    assert trial_count(_plan(6, 3, samples=4)) == "2 cells x 3 seeds x 4 samples = 24 trials"


def test_submit_estimate_says_cells_times_seeds(
    client: TestClient,
    team_key: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The issue's case: a 2-cell grid (two learning rates) over 2 seeds is 4 trials, not `4 cells x 1`."""
    monkeypatch.setattr(client_cmd, "connect", lambda _args: smartune.Client(key=team_key, http=client))
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**QUICK_SPEC, "seeds": [1, 2]}))
    assert main(["submit", str(spec), "--estimate"]) == 0
    assert capsys.readouterr().out.startswith("2 cells x 2 seeds = 4 trials on cpu")
