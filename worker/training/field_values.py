"""Reading one field of a data row: a text, or a label as a class id or a regression score.

Every source worker.training.data reads (GLUE TSV, custom tables, hub datasets) hands its fields here: a
string from a file, or a JSON or hub value. A bad value raises :class:`DataError` naming the file, row and
column, and describes the value by its type only, never by its content: a file may be a secret that a
symlink smuggled in (see worker.training.files).
"""

from __future__ import annotations

import math
from typing import Any

from worker.contract.tasks import TaskSpec
from worker.training.files import DataError, Where


def _kind(value: Any) -> str:
    """What a JSON or hub value is, by type only: its content stays out of every message."""
    names = {bool: "a boolean", int: "a number", float: "a number", list: "a list", dict: "an object"}
    return "nothing (null)" if value is None else names.get(type(value), f"a {type(value).__name__}")


def parse_text(value: Any, file: Where, row: int, column: str) -> str:
    """A text field, unchanged (GLUE keeps trailing spaces); empty or non-string values are errors."""
    if not isinstance(value, str):
        raise DataError(f"expected text, got {_kind(value)}", file=file, row=row, column=column)
    if not value.strip():
        raise DataError("empty text", file=file, row=row, column=column)
    return value


def parse_label(task: TaskSpec, value: Any, file: Where, row: int, column: str) -> int | float | None:
    """The label id (classification) or score (regression); None marks a row to drop (no gold label)."""
    if task.labels is None:
        try:  # a string from a file, or a JSON/hub number (bool is no score; an int past 1e308 overflows)
            score = math.nan if isinstance(value, bool) else float(value)
        except (TypeError, ValueError, OverflowError):
            score = math.nan
        if not math.isfinite(score):
            raise DataError("cannot parse the regression score: expected a finite number",
                            file=file, row=row, column=column)  # fmt: skip
        return score
    # JSON and the hub give integers; files give strings. Compare as text first ("0"/"1" labels).
    # An integer label is a short one: str() of one past 4300 digits raises ValueError (CPython's limit).
    is_int = isinstance(value, int) and not isinstance(value, bool) and value.bit_length() <= 64
    text = str(value).strip() if isinstance(value, str) or is_int else None
    if text is not None and text in task.skip_labels:
        return None
    if text is not None:
        text = task.canonical_label(text)
        if text in task.labels:
            return task.labels.index(text)
        # An integer that is not itself a label value is a Hugging Face ClassLabel id, whose order
        # TaskSpec.labels follows (e.g. RTE exported with datasets: 0 = entailment).
        if is_int and 0 <= value < len(task.labels):
            return int(value)
    allowed = ", ".join(repr(v) for v in task.labels)
    raise DataError(f"unknown label: expected one of {allowed}", file=file, row=row, column=column)
