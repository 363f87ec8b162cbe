"""`smartune results`: the registered model under the cells, and a multitask job's table of tasks."""

from __future__ import annotations

from typing import Any

import pytest

from cli.view_cmd import _summary

CELL = {"params": {"learning_rate": 1e-4}, "n": 2, "mean": 0.7, "std": 0.01}


def test_a_single_task_job_names_its_registered_model(capsys: pytest.CaptureFixture[str]) -> None:
    registered = {
        "name": "smartune-job-1",
        "alias": "best",
        "version": "3",
        "uri": "models:/smartune-job-1@best",
    }
    _summary({"job_id": "job-1", "cells": [CELL], "registered_model": registered}, "job-1")
    assert capsys.readouterr().out.endswith("model: models:/smartune-job-1@best (version 3)\n")
    _summary({"cells": [CELL], "registered_model": {"version": None, "error": "no trial completed"}}, "job-1")
    assert capsys.readouterr().out.endswith("model: not registered: no trial completed\n")


def test_a_job_names_its_version_of_the_teams_model_and_where_best_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    registered = {
        "name": "smartune-nlp-rte",
        "version": "3",
        "uri": "models:/smartune-nlp-rte/3",
        "best_version": "2",
    }
    _summary({"job_id": "job-1", "cells": [CELL], "registered_model": registered}, "job-1")
    assert capsys.readouterr().out.endswith(
        "model: models:/smartune-nlp-rte/3 (version 3; best: version 2)\n"
    )
    mrpc = {"name": "smartune-nlp-mrpc", "version": None, "error": "no trial completed"}
    both = {"rte": registered, "mrpc": mrpc}
    _summary({"cells": [CELL], "registered_model": registered, "registered_models": both}, "job-1")
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "model (mrpc): not registered: no trial completed",
        "model (rte): models:/smartune-nlp-rte/3 (version 3; best: version 2)",
    ]


def test_a_multitask_job_lists_each_task_with_its_model(capsys: pytest.CaptureFixture[str]) -> None:
    tasks: dict[str, Any] = {
        "stsb": {"value": 0.81234, "stage": "joint", "epoch": 2, "trial_id": "t2",
                 "registered_model": {"version": "1", "uri": "models:/smartune-job-1-stsb@best"}},
        "rte": {"value": 0.6, "stage": "finetune", "epoch": 1, "trial_id": "t1",
                "registered_model": {"version": None, "error": "the store is down"}},
    }  # fmt: skip
    _summary(
        {"job_id": "job-1", "cells": [CELL], "tasks": tasks, "registered_model": {"version": None}}, "job-1"
    )
    lines = capsys.readouterr().out.splitlines()
    table = lines[lines.index(next(line for line in lines if line.startswith("TASK"))) :]
    assert table[1].split() == [
        "rte",
        "0.6000",
        "finetune",
        "1",
        "t1",
        "not",
        "registered:",
        "the",
        "store",
        "is",
        "down",
    ]
    assert table[2].split() == [
        "stsb",
        "0.8123",
        "joint",
        "2",
        "t2",
        "models:/smartune-job-1-stsb@best",
        "(version",
        "1)",
    ]
    assert not any(line.startswith("model:") for line in lines)  # per task, not for the job
