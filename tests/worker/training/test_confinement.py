"""Data confinement (worker.training.files): with SMARTUNE_DATA_ROOTS set, every file a run opens must
resolve inside the roots, and no error of the data loader quotes what a file holds.

The secret here is a real file outside the roots, reached by a real symlink inside an accepted folder,
as in the incident (`train.tsv -> ~/.ray/auth_token`). Each refusal is checked for the secret's text in
its message *and* in everything chained to it, since a job's log prints the whole chain.
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path

import pytest

from worker.contract.tasks import get_task
from worker.training.data import DataError, load_examples, load_glue_split, load_table
from worker.training.files import DATA_ROOTS_ENV, data_roots, open_data
from worker.training.models import describe_model, resolve_model
from worker.training.provenance import files_digest

SECRET = "tok-SECRET-7f3a9c"
RTE_HEADER = "index\tsentence1\tsentence2\tlabel\n"


def _everything_said(error: BaseException) -> str:
    """The message and the whole printed chain (what a job log would show)."""
    return "".join(traceback.format_exception(error))


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """An allowed root with a GLUE-style folder, and a secret outside every root."""
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    (allowed / "glue" / "RTE").mkdir(parents=True)
    outside.mkdir()
    secret = outside / "auth_token"
    secret.write_text(f"{SECRET}\t{SECRET}\t{SECRET}\t{SECRET}\n{SECRET}\n")
    rows = RTE_HEADER + "0\tA man eats.\tSomeone eats.\tentailment\n"
    (allowed / "glue" / "RTE" / "dev.tsv").write_text(rows)
    monkeypatch.setenv(DATA_ROOTS_ENV, str(allowed))
    return {"allowed": allowed, "outside": outside, "secret": secret}


def _refused_without_leak(call: object, given: Path, secret: Path) -> DataError:
    with pytest.raises(DataError, match="outside the allowed data roots") as info:
        call()  # type: ignore[operator]
    said = _everything_said(info.value)
    assert str(given) in str(info.value)  # the file as given ...
    assert SECRET not in said and str(secret) not in said  # ... never its target or its content
    return info.value


def test_a_symlink_escaping_the_roots_is_refused_without_leaking_its_target(layout: dict[str, Path]) -> None:
    link = layout["allowed"] / "glue" / "RTE" / "train.tsv"
    link.symlink_to(layout["secret"])
    rte = get_task("rte")
    _refused_without_leak(
        lambda: load_glue_split(rte, layout["allowed"] / "glue", "train"), link, layout["secret"]
    )
    _refused_without_leak(
        lambda: load_examples(rte, str(layout["allowed"] / "glue"), "train"), link, layout["secret"]
    )
    _refused_without_leak(lambda: load_table(link, rte), link, layout["secret"])
    _refused_without_leak(lambda: files_digest([link]), link, layout["secret"])  # provenance reads it too


def test_a_linked_folder_and_a_dangling_link_are_refused_before_anything_is_said(
    layout: dict[str, Path],
) -> None:
    folder = layout["allowed"] / "data"
    folder.symlink_to(layout["outside"], target_is_directory=True)
    rte = get_task("rte")
    _refused_without_leak(lambda: load_examples(rte, str(folder), "train"), folder, layout["secret"])
    # A link to a file outside that does not exist is refused the same way: existence is not leaked.
    dangling = layout["allowed"] / "glue" / "RTE" / "train.tsv"
    dangling.symlink_to(layout["outside"] / "no-such-file")
    _refused_without_leak(
        lambda: load_glue_split(rte, layout["allowed"] / "glue", "train"), dangling, layout["secret"]
    )


def test_a_legit_file_inside_passes_and_links_within_the_roots_are_fine(layout: dict[str, Path]) -> None:
    rte = get_task("rte")
    glue = layout["allowed"] / "glue"
    assert len(load_glue_split(rte, glue, "dev")) == 1
    (glue / "RTE" / "train.tsv").symlink_to(glue / "RTE" / "dev.tsv")  # a link that stays inside
    assert load_examples(rte, str(glue), "train") == load_examples(rte, str(glue), "dev")


def test_unset_roots_confine_nothing(layout: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATA_ROOTS_ENV)
    assert data_roots() is None
    outside_file = layout["outside"] / "dev.tsv"
    outside_file.write_text((layout["allowed"] / "glue" / "RTE" / "dev.tsv").read_text())
    assert len(load_table(outside_file, get_task("rte"))) == 1  # a local `smartune train` reads anything


def test_the_glue_folder_and_the_packaged_model_are_always_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    glue = tmp_path / "glue"
    glue.mkdir()
    monkeypatch.setenv("SMARTUNE_GLUE_DIR", str(glue))
    monkeypatch.setenv(DATA_ROOTS_ENV, "")  # set but empty: confined to what is always allowed
    roots = data_roots()
    assert roots is not None and glue.resolve() in roots
    assert Path(describe_model("minilm-l6")["path"]).resolve() in roots
    monkeypatch.setenv(DATA_ROOTS_ENV, f"{tmp_path}{os.pathsep}relative/root")
    with pytest.raises(DataError, match="'relative/root' is not an absolute path"):
        data_roots()


def test_a_fifo_is_refused_without_waiting_for_a_writer(layout: dict[str, Path]) -> None:
    fifo = layout["allowed"] / "glue" / "RTE" / "train.tsv"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="not a regular file"):
        open_data(fifo)


def test_a_local_model_folder_is_confined_with_every_file_in_it(
    layout: dict[str, Path], tmp_path: Path
) -> None:
    model = layout["allowed"] / "model"
    model.mkdir()
    (model / "config.json").symlink_to(layout["secret"])
    for call in (lambda: describe_model(str(model)),
                 lambda: resolve_model(str(model), num_labels=2, is_regression=False, head_dropout=0.1, seed=0)):  # fmt: skip
        with pytest.raises(DataError, match="outside the allowed data roots") as info:
            call()
        said = _everything_said(info.value)
        assert str(info.value).startswith("model: ") and str(model / "config.json") in said
        assert SECRET not in said and str(layout["secret"]) not in said
    (model / "config.json").unlink()
    (model / "config.json").write_text("{}")
    assert describe_model(str(model))["kind"] == "local"  # inside, with no link out: fine
    elsewhere = tmp_path / "outside-model"
    elsewhere.mkdir()
    (elsewhere / "config.json").write_text("{}")
    with pytest.raises(DataError, match="outside the allowed data roots"):
        describe_model(str(elsewhere))


# Malformed files: every message names the file, the row, the column and what was expected, and never
# the text of the cell or the header (the file could be a secret that passed as data).

_MALFORMED = {
    "unknown-label.tsv": (RTE_HEADER + f"0\ta\tb\t{SECRET}\n", "unknown label", 2, "label"),
    "too-few-fields.tsv": (RTE_HEADER + f"0\t{SECRET}\n", "too few fields", 2, "sentence2"),
    "missing-column.tsv": (f"index\t{SECRET}\tsentence2\tlabel\n0\ta\tb\tentailment\n", "missing column", 1, "sentence1"),
    "score.csv": (f"sentence1,sentence2,label\na,b,{SECRET}\n", "regression score", 2, "label"),
    "not-text.jsonl": (f'{{"sentence1": ["{SECRET}"], "sentence2": "b", "label": "entailment"}}\n', "expected text, got a list", 1, "sentence1"),
    "json-label.jsonl": (f'{{"sentence1": "a", "sentence2": "b", "label": "{SECRET}"}}\n', "unknown label", 1, "label"),
    "broken.jsonl": (f'{{"sentence1": "{SECRET}", \n', "invalid JSON", 1, None),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(_MALFORMED))
def test_malformed_rows_are_named_without_their_text(name: str, layout: dict[str, Path]) -> None:
    text, what, row, column = _MALFORMED[name]
    path = layout["allowed"] / name
    path.write_text(text)
    task = get_task("stsb" if name == "score.csv" else "rte")
    with pytest.raises(DataError, match=what) as info:
        load_table(path, task)
    error = info.value
    assert error.file == path and error.row == row and (column is None or column in str(error))
    assert SECRET not in _everything_said(error)


def test_a_binary_file_is_named_by_its_line_not_its_bytes(layout: dict[str, Path]) -> None:
    path = layout["allowed"] / "glue" / "RTE" / "train.tsv"
    path.write_bytes(RTE_HEADER.encode() + b"0\ta\tb\tentailment\n1\t\xff\xfe" + SECRET.encode() + b"\x00\n")
    with pytest.raises(DataError, match="not UTF-8") as info:
        load_glue_split(get_task("rte"), layout["allowed"] / "glue", "train")
    assert info.value.row == 3 and SECRET not in _everything_said(info.value)
    assert "0xff" not in _everything_said(info.value)  # not even the offending byte
