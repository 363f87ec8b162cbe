"""`python -m worker.training.dataset_check` on hostile rows: every malformed file is its one clean error
line (exit 1) naming the file and row, never a crash (which the control plane turned into a 500).

The checker runs in-process here (its `main`, with the argv the service gives the child); the real child is
run by tests/integration/test_hostile_inputs.py and test_datasets_api.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.contract.tasks import get_task
from worker.training import dataset_check
from worker.training.field_values import parse_label
from worker.training.files import DataError

GOOD_ROW = {"sentence1": "A cat sat.", "sentence2": "A cat is sitting.", "label": "entailment"}
DEEP = 100_000  # a row nested this deep overflowed json.loads' recursion (RecursionError)


def lay_out(task: str, files: dict[str, bytes], root: Path) -> Path:
    """`files` in the folder the service lays an upload out in (service.datasets.validate.folder_name)."""
    folder = root / (get_task(task).glue_dir or task)
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def run_check(task: str, files: dict[str, bytes], root: Path) -> tuple[int, dict[str, Any]]:
    """The checker's exit status and its one JSON line."""
    folder = lay_out(task, files, root)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = dataset_check.main(["--task", task, str(folder)])
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines
    return code, json.loads(lines[0])


def jsonl(*rows: str) -> bytes:
    return "".join(f"{row}\n" for row in rows).encode()


def deep_row(depth: int) -> str:
    return '{"sentence1": ' + "[" * depth + "]" * depth + ', "sentence2": "b", "label": "entailment"}'


def test_a_row_nested_100000_deep_is_named_not_a_crash(tmp_path: Path) -> None:
    dev = jsonl(json.dumps(GOOD_ROW))
    code, answer = run_check("rte", {"train.jsonl": jsonl(deep_row(DEEP)), "dev.jsonl": dev}, tmp_path)
    assert code == 1
    error = answer["error"]
    assert (error["file"], error["row"]) == ("train.jsonl", 1) and "nested deeper than" in error["message"]


def test_an_sts_b_label_of_400_digits_is_named_not_a_crash(tmp_path: Path) -> None:
    huge = '{"sentence1": "a", "sentence2": "b", "label": ' + "9" * 400 + "}"
    files = {"train.jsonl": jsonl('{"sentence1": "a", "sentence2": "b", "label": 1.5}', huge),
             "dev.jsonl": jsonl('{"sentence1": "a", "sentence2": "b", "label": 2}')}  # fmt: skip
    code, answer = run_check("stsb", files, tmp_path)
    assert code == 1
    assert (answer["error"]["file"], answer["error"]["row"]) == ("train.jsonl", 2), answer


def test_brackets_inside_texts_are_no_nesting(tmp_path: Path) -> None:
    """The depth bound counts structure, not characters: a text full of brackets is an ordinary row."""
    texts = dict(GOOD_ROW, sentence1="[{" * 5000 + ' \\" ' + "}]" * 5000)
    code, answer = run_check(
        "rte", {"train.jsonl": jsonl(json.dumps(texts)), "dev.jsonl": jsonl(json.dumps(GOOD_ROW))}, tmp_path
    )
    assert (code, answer) == (0, {"rows": {"train": 1, "dev": 1}})


def test_a_line_past_the_length_bound_is_refused_before_parsing(tmp_path: Path) -> None:
    long = json.dumps(dict(GOOD_ROW, sentence1="x" * (1 << 20)))
    code, answer = run_check("rte", {"train.jsonl": jsonl(long), "dev.jsonl": jsonl(long)}, tmp_path)
    assert code == 1 and answer["error"]["row"] == 1 and "longer than" in answer["error"]["message"]


@pytest.mark.parametrize("value", [10**400, -(10**400)], ids=["10^400", "-10^400"])
def test_a_score_beyond_float_is_not_finite(value: int) -> None:
    """A hub or JSON integer past 1e308: float() overflows (OverflowError); the label must be finite."""
    with pytest.raises(DataError, match="finite number"):
        parse_label(get_task("stsb"), value, "f.jsonl", 3, "'label'")


def test_a_class_label_of_5000_digits_is_an_unknown_label() -> None:
    """str() of an integer past 4300 digits raises ValueError in CPython: no DataError, a crash."""
    with pytest.raises(DataError, match="unknown label"):
        parse_label(get_task("rte"), 10**5000, "f.jsonl", 3, "'label'")


# --- any malformed row ----------------------------------------------------------------------------------

_JSON_CHARS = st.sampled_from(list('[]{}",:\\ -.0123456789eEtrufalsn') + ["\u202e", "\x00", "\ud800", "é"])
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**500), max_value=10**500),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)  # fmt: skip


@st.composite
def _jsonl_row(draw: st.DrawFn) -> str:
    """A row that is almost right, right, or anything: fields of any JSON value, nesting of any depth,
    integers of any length, or arbitrary characters."""
    kind = draw(st.sampled_from(["fields", "deep", "digits", "chars"]))
    if kind == "fields":
        row = {key: draw(_VALUES) for key in draw(st.sets(st.sampled_from([*GOOD_ROW, "x"])))}
        return json.dumps(row, allow_nan=True)
    if kind == "deep":
        depth = draw(st.integers(0, 5000))
        opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}"), ("[", "")]))
        return '{"sentence1": "a", "sentence2": "b", "label": ' + opener * depth + "1" + closer * depth + "}"
    if kind == "digits":
        return '{"sentence1": "a", "sentence2": "b", "label": ' + "9" * draw(st.integers(1, 6000)) + "}"
    return "".join(draw(st.lists(_JSON_CHARS, max_size=80)))


_FILES = st.one_of(
    st.lists(_jsonl_row(), min_size=1, max_size=4).map(
        lambda rows: ("jsonl", "\n".join(rows).encode("utf-8", "surrogatepass"))
    ),
    st.tuples(st.sampled_from(["tsv", "csv"]), st.binary(max_size=200)),
    st.tuples(st.sampled_from(["tsv", "csv", "jsonl"]), st.text(max_size=200).map(str.encode)),
)


@settings(max_examples=100, deadline=None)
@given(task=st.sampled_from(["rte", "stsb"]), train=_FILES, dev=_FILES)
def test_no_malformed_row_escapes_as_anything_but_a_clean_data_error(
    task: str, train: tuple[str, bytes], dev: tuple[str, bytes]
) -> None:
    """`check` returns the rows per split or raises DataError, naming the file of any row it names; any
    other exception fails the test (the service answered such an upload 500)."""
    files = {f"train.{train[0]}": train[1], f"dev.{dev[0]}": dev[1]}
    with tempfile.TemporaryDirectory() as root:
        folder = lay_out(task, files, Path(root))
        try:
            rows = dataset_check.check(task, folder)
        except DataError as err:
            assert err.row is None or Path(str(err.file)).name in files, err
        else:
            assert set(rows) == {"train", "dev"} and all(n > 0 for n in rows.values())
