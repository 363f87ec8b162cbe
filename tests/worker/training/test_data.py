"""Data loading: the real GLUE files, custom tables, hub datasets (faked), errors, sampling."""

from __future__ import annotations

import json
import sys
import types
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from worker.contract.tasks import get_task
from worker.training.data import (
    DataError,
    Example,
    load_examples,
    load_glue_split,
    load_hub,
    load_table,
)
from worker.training.sampling import subsample

# Row counts from /work/shared/data/glue/README.md (= the published GLUE / HF `glue` split sizes).
GLUE_ROWS = {
    "cola": (8551, 1043),
    "sst2": (67349, 872),
    "mrpc": (3668, 408),
    "stsb": (5749, 1500),
    "rte": (2490, 277),
    "wnli": (635, 71),
}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# --- the real GLUE files ----------------------------------------------------------------------------


@pytest.mark.glue
@pytest.mark.parametrize("name", sorted(GLUE_ROWS))
def test_glue_splits_load_with_published_row_counts(glue_dir: Path, name: str) -> None:
    task = get_task(name)
    for split, rows in zip(("train", "dev"), GLUE_ROWS[name], strict=True):
        examples = load_glue_split(task, glue_dir, split)
        assert len(examples) == rows, (name, split)
        assert all(len(e.texts) == len(task.text_columns) for e in examples)
        if task.is_regression:
            assert all(isinstance(e.label, float) and 0.0 <= e.label <= 5.0 for e in examples)
        else:
            assert {e.label for e in examples} == set(range(task.num_labels))


@pytest.mark.glue
def test_glue_label_counts_and_first_rows(glue_dir: Path) -> None:
    # Label counts from the README, mapped through each task's label order.
    rte = load_glue_split(get_task("rte"), glue_dir, "train")
    assert Counter(e.label for e in rte) == {0: 1249, 1: 1241}  # 0 = entailment
    assert rte[0] == Example(
        ("No Weapons of Mass Destruction Found in Iraq Yet.", "Weapons of Mass Destruction Found in Iraq."), 1
    )
    sst2 = load_glue_split(get_task("sst2"), glue_dir, "dev")
    assert Counter(e.label for e in sst2) == {0: 428, 1: 444}
    cola = load_glue_split(get_task("cola"), glue_dir, "dev")  # no header: first line is data
    # The stratum is CoLA's column 0, the source publication.
    assert cola[0] == Example(("The sailors rode the breeze clear of the rocks.",), 1, "gj04")
    assert Counter(e.label for e in cola) == {0: 322, 1: 721}
    mrpc = load_glue_split(get_task("mrpc"), glue_dir, "train")  # header starts with a BOM
    assert Counter(e.label for e in mrpc) == {0: 1194, 1: 2474}
    assert mrpc[0].texts[0].startswith("Amrozi accused his brother")
    stsb = load_glue_split(get_task("stsb"), glue_dir, "dev")
    assert stsb[0] == Example(
        ("A man with a hard hat is dancing.", "A man wearing a hard hat is dancing."), 5.0, "main-captions"
    )  # the stratum is the `genre` column
    assert rte[0].stratum is None and mrpc[0].stratum is None  # no source column
    assert abs(sum(e.label for e in stsb) / len(stsb) - 2.36) < 0.01


@pytest.mark.glue
def test_load_examples_takes_the_root_or_the_task_folder(glue_dir: Path) -> None:
    task = get_task("wnli")
    from_root = load_examples(task, glue_dir, "dev")
    assert from_root == load_examples(task, glue_dir / "WNLI", "dev")
    assert from_root == load_examples(task, str(glue_dir), "dev")
    assert len(from_root) == 71


# --- GLUE layout with synthetic files ---------------------------------------------------------------


def test_cola_layout_without_header(tmp_path: Path) -> None:
    write(tmp_path / "CoLA" / "dev.tsv", "gj04\t1\t\tGood one.\ngj04\t0\t*\tBad one one.")  # no final LF
    examples = load_glue_split(get_task("cola"), tmp_path, "dev")
    assert examples == [Example(("Good one.",), 1, "gj04"), Example(("Bad one one.",), 0, "gj04")]


def test_tsv_has_no_quote_processing(tmp_path: Path) -> None:
    write(tmp_path / "SST-2" / "train.tsv", 'sentence\tlabel\n" quoted , text\t1\nit \'s "x" \t0\n')
    examples = load_glue_split(get_task("sst2"), tmp_path, "train")
    assert [e.texts[0] for e in examples] == ['" quoted , text', 'it \'s "x" ']


def test_mnli_uses_named_columns_and_its_dev_files(tmp_path: Path) -> None:
    header = "index\tpromptID\tpairID\tgenre\tsentence1\tsentence2\tlabel1\tgold_label\n"
    write(tmp_path / "MNLI" / "dev_mismatched.tsv", header + "0\t1\t1e\tx\tP.\tH.\tneutral\tcontradiction\n")
    examples = load_examples(get_task("mnli"), tmp_path, "dev_mismatched")
    assert examples == [Example(("P.", "H."), 2, "x")]  # the genre is its stratum


# --- errors: file, row and column in the message ----------------------------------------------------


def assert_names(error: DataError, file: Path, row: int | None, column: str | None) -> None:
    message = str(error)
    assert file.name in message
    if row is not None:
        assert f"row {row}" in message and error.row == row
    if column is not None:
        assert column in message


def test_missing_column(tmp_path: Path) -> None:
    path = write(tmp_path / "RTE" / "train.tsv", "index\tsentence1\tlabel\n0\ta\tentailment\n")
    with pytest.raises(DataError, match="missing column") as info:
        load_glue_split(get_task("rte"), tmp_path, "train")
    assert_names(info.value, path, 1, "sentence2")


def test_unknown_label_lists_the_allowed_ones(tmp_path: Path) -> None:
    rows = "0\ta\tb\tentailment\n1\tc\td\tentailed\n"
    path = write(tmp_path / "RTE" / "dev.tsv", "index\tsentence1\tsentence2\tlabel\n" + rows)
    with pytest.raises(DataError, match="unknown label") as info:
        load_glue_split(get_task("rte"), tmp_path, "dev")
    assert_names(info.value, path, 3, "label")
    assert "expected one of 'entailment', 'not_entailment'" in str(info.value)
    assert "entailed" not in str(info.value)  # the cell's text stays out of the message


def test_empty_file_and_header_only_file(tmp_path: Path) -> None:
    empty = write(tmp_path / "SST-2" / "train.tsv", "")
    with pytest.raises(DataError, match="empty file") as info:
        load_glue_split(get_task("sst2"), tmp_path, "train")
    assert_names(info.value, empty, None, None)
    header_only = write(tmp_path / "SST-2" / "dev.tsv", "sentence\tlabel\n\n")
    with pytest.raises(DataError, match="no data rows"):
        load_glue_split(get_task("sst2"), tmp_path, "dev")
    assert header_only.exists()


def test_empty_text(tmp_path: Path) -> None:
    path = write(tmp_path / "MRPC" / "dev.tsv", "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                 "1\t1\t2\tA b .\tC d .\n0\t3\t4\t  \tE f .\n")  # fmt: skip
    with pytest.raises(DataError, match="empty text") as info:
        load_glue_split(get_task("mrpc"), tmp_path, "dev")
    assert_names(info.value, path, 3, "#1 String")


def test_unparsable_regression_score(tmp_path: Path) -> None:
    path = write(tmp_path / "s.csv", "sentence1,sentence2,score\na,b,4.2\nc,d,high\n")
    with pytest.raises(DataError, match="regression score: expected a finite number") as info:
        load_table(path, get_task("stsb"), {"label": "score"})
    assert_names(info.value, path, 3, "score")
    nan = write(tmp_path / "n.csv", "sentence1,sentence2,label\na,b,nan\n")
    with pytest.raises(DataError, match="regression score"):
        load_table(nan, get_task("stsb"))


def test_too_few_fields(tmp_path: Path) -> None:
    path = write(tmp_path / "CoLA" / "train.tsv", "gj04\t1\t\tFine.\n\ngj04\t1\n")
    with pytest.raises(DataError, match="too few fields: expected at least 4, got 2") as info:
        load_glue_split(get_task("cola"), tmp_path, "train")
    assert_names(info.value, path, 3, "sentence")  # the blank line 2 still counts as a line


def test_jsonl_errors_name_the_line(tmp_path: Path) -> None:
    task = get_task("sst2")
    bad_type = write(tmp_path / "a.jsonl", '{"sentence": "ok", "label": 1}\n{"sentence": 5, "label": 0}\n')
    with pytest.raises(DataError, match="expected text") as info:
        load_table(bad_type, task)
    assert_names(info.value, bad_type, 2, "sentence")
    missing = write(tmp_path / "b.jsonl", '{"sentence": "ok", "label": 1}\n\n{"text": "x", "label": 1}\n')
    with pytest.raises(DataError, match="missing column") as info:
        load_table(missing, task)
    assert_names(info.value, missing, 3, "sentence")
    broken = write(tmp_path / "c.jsonl", '{"sentence": "ok", "label": 1\n')
    with pytest.raises(DataError, match="invalid JSON") as info:
        load_table(broken, task)
    assert_names(info.value, broken, 1, None)


def test_csv_row_is_the_line_the_record_starts_on(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv", 'text,y\n"two\nlines",1\n"three",7\n')
    with pytest.raises(DataError, match="unknown label") as info:
        load_table(path, get_task("sst2"), {"sentence": "text", "label": "y"})
    assert_names(info.value, path, 4, "y")


def test_bad_mapping_and_missing_sources(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv", "sentence,label\nx,1\n")
    with pytest.raises(DataError, match="unknown canonical column") as info:
        load_table(path, get_task("sst2"), {"text": "sentence"})
    assert_names(info.value, path, None, "text")
    with pytest.raises(DataError, match="no such file or folder"):
        load_examples(get_task("sst2"), str(tmp_path / "nope.csv"), "train")
    with pytest.raises(DataError, match="looked for: SST-2/dev.tsv, dev.jsonl"):
        load_examples(get_task("sst2"), tmp_path, "dev")
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"sentence,label\nok,1\ncaf\xe9,1\n")
    with pytest.raises(DataError, match="not UTF-8") as info:
        load_table(latin, get_task("sst2"))
    assert_names(info.value, latin, 3, None)


# --- custom tables ----------------------------------------------------------------------------------


def test_csv_with_mapping_and_quoting(tmp_path: Path) -> None:
    path = write(tmp_path / "data.csv", 'id,premise,hyp,gold\n1,"A, quoted ""premise""",H one,entailment\n'
                 "2,P two,H two,not_entailment\n")  # fmt: skip
    examples = load_table(
        path, get_task("rte"), {"sentence1": "premise", "sentence2": "hyp", "label": "gold"}
    )
    assert examples == [Example(('A, quoted "premise"', "H one"), 0), Example(("P two", "H two"), 1)]


def test_jsonl_hub_style_ids_aliases_and_dropped_rows(tmp_path: Path) -> None:
    # RTE exported with `datasets`: integer ClassLabel ids in our label order.
    rte = write(tmp_path / "rte.jsonl", '{"sentence1": "a", "sentence2": "b", "label": 1}\n')
    assert load_table(rte, get_task("rte")) == [Example(("a", "b"), 1)]
    # ANLI's own files spell labels e/n/c and name the premise "context".
    anli = write(tmp_path / "anli.jsonl", '{"context": "p", "hypothesis": "h", "label": "c"}\n')
    assert load_table(anli, get_task("anli_r1"), {"premise": "context"}) == [Example(("p", "h"), 2)]
    # SNLI marks "no consensus" with "-": such rows are dropped, as everywhere else.
    rows = [{"premise": "p", "hypothesis": "h", "label": v} for v in ("neutral", "-", "entailment")]
    snli = write(tmp_path / "snli.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    assert [e.label for e in load_table(snli, get_task("snli"))] == [1, 0]
    only_dropped = write(tmp_path / "none.jsonl", json.dumps(rows[1]) + "\n")
    with pytest.raises(DataError, match="1 rows without a gold label"):
        load_table(only_dropped, get_task("snli"))


def test_folder_of_split_files(tmp_path: Path) -> None:
    write(tmp_path / "train.tsv", "text\ty\nA b.\t1\n")
    write(tmp_path / "validation.jsonl", '{"text": "C d.", "y": "0"}\n')
    mapping = {"sentence": "text", "label": "y"}
    task = get_task("sst2")
    assert load_examples(task, tmp_path, "train", mapping) == [Example(("A b.",), 1)]
    assert load_examples(task, tmp_path, "dev", mapping) == [Example(("C d.",), 0)]  # dev -> validation
    assert load_examples(task, tmp_path / "train.tsv", "ignored", mapping) == [Example(("A b.",), 1)]


# --- hub (never the network: `datasets` is absent or faked) -----------------------------------------


def test_hub_without_datasets_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(DataError, match="optional `datasets` package"):
        load_examples(get_task("rte"), "glue", "dev")


class FakeSplit(list[dict[str, Any]]):
    column_names = ["premise", "hypothesis", "sentence1", "sentence2", "label"]


def test_hub_rows_map_like_files(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str | None, str]] = []

    def load_dataset(path: str, name: str | None, split: str) -> FakeSplit:
        calls.append((path, name, split))
        return FakeSplit(dict.fromkeys(FakeSplit.column_names[:4], "t") | {"label": v} for v in labels)

    labels = (2, -1, 0)  # SNLI: -1 = no gold label

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    assert [e.label for e in load_examples(get_task("snli"), "snli", "dev")] == [2, 0]  # -1 dropped
    with pytest.raises(
        DataError,
        match=r"hub:facebook/anli\[train_r3\], row 2, column 'label': unknown label: expected one of",
    ):
        load_hub(get_task("anli_r3"), "train")  # only SNLI's -1 means "no gold label"
    labels = (1, 0)
    assert [e.label for e in load_examples(get_task("rte"), "glue", "dev")] == [1, 0]
    assert calls == [
        ("snli", None, "validation"),
        ("facebook/anli", None, "train_r3"),
        ("glue", "rte", "validation"),  # naming the task's dataset selects its config
    ]


# --- settings, sampling -----------------------------------------------------------------------------


EXAMPLES = [Example((f"text {i}",), i % 2) for i in range(2000)]


@pytest.mark.parametrize(("fraction", "size"), [(0.001, 2), (0.01, 20), (0.1, 200), (1.0, 2000), (1e-6, 1)])
def test_subsample_sizes(fraction: float, size: int) -> None:
    assert len(subsample(EXAMPLES, fraction, seed=0)) == size


def test_subsample_is_deterministic_nested_and_ordered() -> None:
    small, large = subsample(EXAMPLES, 0.01, seed=7), subsample(EXAMPLES, 0.1, seed=7)
    assert small == subsample(EXAMPLES, 0.01, seed=7)
    assert small != subsample(EXAMPLES, 0.01, seed=8)
    assert set(small) <= set(large)
    positions = [EXAMPLES.index(e) for e in large]
    assert positions == sorted(positions)
    assert subsample(EXAMPLES[:3], 0.001, seed=1)[0] in EXAMPLES[:3]  # at least one example
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="fraction"):
            subsample(EXAMPLES, bad, seed=0)
