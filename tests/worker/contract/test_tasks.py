"""The task registry: contents as the design and GLUE define them, lookup errors, immutability."""

from __future__ import annotations

import dataclasses

import pytest

from worker.contract.tasks import GLUE_TASKS, TASKS, TaskSpec, get_task

ALL_TASKS = {*GLUE_TASKS, "snli", "scitail", "anli_r1", "anli_r2", "anli_r3"}


def test_registry_holds_exactly_the_supported_tasks() -> None:
    assert set(TASKS) == ALL_TASKS
    assert GLUE_TASKS == ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")
    assert all(spec.name == name for name, spec in TASKS.items())


@pytest.mark.parametrize(
    ("name", "metrics", "main"),
    [
        ("cola", ("mcc",), "mcc"),
        ("sst2", ("accuracy",), "accuracy"),
        ("mrpc", ("accuracy", "f1"), "f1"),
        ("stsb", ("pearson", "spearman"), "pearson"),
        ("qqp", ("accuracy", "f1"), "accuracy"),
        ("mnli", ("accuracy",), "accuracy"),
        ("qnli", ("accuracy",), "accuracy"),
        ("rte", ("accuracy",), "accuracy"),
        ("wnli", ("accuracy",), "accuracy"),
        ("snli", ("accuracy",), "accuracy"),
        ("scitail", ("accuracy",), "accuracy"),
        ("anli_r1", ("accuracy",), "accuracy"),
        ("anli_r3", ("accuracy",), "accuracy"),
    ],
)
def test_metrics_follow_glue(name: str, metrics: tuple[str, ...], main: str) -> None:
    spec = get_task(name)
    assert spec.metrics == metrics
    assert spec.main_metric == main


def test_head_dropout_follows_the_paper() -> None:
    dropouts = {name: spec.head_dropout for name, spec in TASKS.items()}
    assert dropouts.pop("mnli") == 0.3
    assert dropouts.pop("cola") == 0.05
    assert set(dropouts.values()) == {0.1}


def test_labels_regression_and_num_labels() -> None:
    stsb = get_task("stsb")
    assert stsb.is_regression and stsb.labels is None and stsb.num_labels == 1
    assert get_task("rte").labels == ("entailment", "not_entailment")
    assert get_task("sst2").labels == ("0", "1")
    assert get_task("mnli").labels == ("entailment", "neutral", "contradiction")
    assert get_task("mnli").num_labels == 3
    for name in ("cola", "sst2", "mrpc", "qqp", "wnli"):
        assert get_task(name).labels == ("0", "1"), name  # "1" = positive class for F1
    assert not any(TASKS[name].is_regression for name in ALL_TASKS - {"stsb"})


def test_text_columns_and_pairs() -> None:
    assert get_task("cola").text_columns == ("sentence",)
    assert not get_task("sst2").is_pair
    assert get_task("rte").text_columns == ("sentence1", "sentence2")
    assert get_task("qqp").text_columns == ("question1", "question2")
    assert all(TASKS[name].is_pair for name in ALL_TASKS - {"cola", "sst2"})


def test_glue_tsv_layout() -> None:
    assert {name: TASKS[name].glue_dir for name in GLUE_TASKS} == {
        "cola": "CoLA",
        "sst2": "SST-2",
        "mrpc": "MRPC",
        "stsb": "STS-B",
        "qqp": "QQP",
        "mnli": "MNLI",
        "qnli": "QNLI",
        "rte": "RTE",
        "wnli": "WNLI",
    }
    assert all(TASKS[name].glue_dir is None for name in ALL_TASKS - set(GLUE_TASKS))
    cola = get_task("cola")
    assert cola.tsv_header is False
    assert cola.tsv_column("sentence") == 3 and cola.tsv_column("label") == 1
    mrpc = get_task("mrpc")
    assert mrpc.tsv_column("sentence1") == "#1 String"
    assert mrpc.tsv_column("label") == "Quality"
    assert get_task("stsb").tsv_column("label") == "score"
    assert all(TASKS[name].tsv_header for name in set(GLUE_TASKS) - {"cola"})


def test_eval_splits_and_hub_locations() -> None:
    mnli = get_task("mnli")
    assert mnli.eval_splits == ("dev_matched", "dev_mismatched")
    assert mnli.splits == ("train", "dev_matched", "dev_mismatched")
    assert mnli.hub_split("dev_mismatched") == "validation_mismatched"
    assert all(TASKS[name].eval_splits == ("dev",) for name in ALL_TASKS - {"mnli"})
    rte = get_task("rte")
    assert (rte.hub_id, rte.hub_config, rte.hub_split("dev")) == ("nyu-mll/glue", "rte", "validation")
    anli = get_task("anli_r2")
    assert anli.hub_split("train") == "train_r2" and anli.hub_split("dev") == "dev_r2"
    assert get_task("scitail").hub_config == "tsv_format"
    assert get_task("snli").hub_split("dev") == "validation"


def test_get_task_accepts_glue_spellings() -> None:
    assert get_task("SST-2") is TASKS["sst2"]
    assert get_task("STS-B") is TASKS["stsb"]
    assert get_task(" RTE ") is TASKS["rte"]
    assert get_task("anli-r1") is TASKS["anli_r1"]


def test_unknown_task_names_it_and_lists_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown task 'glue-xyz'") as info:
        get_task("glue-xyz")
    for name in ALL_TASKS:
        assert name in str(info.value)


def test_specs_are_frozen_and_hashable() -> None:
    spec = get_task("rte")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "other"  # type: ignore[misc]
    assert len({hash(s) for s in TASKS.values()}) == len(TASKS)


def test_inconsistent_spec_is_rejected() -> None:
    with pytest.raises(ValueError, match="main_metric"):
        TaskSpec(name="x", text_columns=("a",), labels=("0", "1"), metrics=("accuracy",), main_metric="f1")
    with pytest.raises(ValueError, match="tsv_columns"):
        TaskSpec(name="x", text_columns=("a",), labels=("0", "1"), metrics=("accuracy",),
                 main_metric="accuracy", glue_dir="X", tsv_columns=(("a", "a"),))  # fmt: skip
