"""One line of a JSON-lines data file, parsed within bounds: no row can crash or stall the reader.

A data row is a flat object of texts and a label, but `json.loads` takes any JSON: a row nested 100,000
deep overflows its recursion (RecursionError), and an integer of 400 digits parses fine, then overflows
`float()` as a regression score (OverflowError); neither is a DataError, so an upload answered 500. So the
line is bounded before it is parsed (its length, then its nesting depth, counted outside strings), and
integers are parsed with a bound on their digits. Each refusal is a DataError naming the file and row,
never quoting the line (see worker.training.files).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from worker.training.files import DataError

MAX_LINE_CHARS = 1 << 20  # characters per row; a row's texts are truncated to a few hundred tokens anyway
MAX_DEPTH = 32  # nested arrays/objects per row; a valid row has depth 1 (2 with a list as a bad value)
MAX_INT_DIGITS = 64  # digits of an integer; a label is a class id or a score, far shorter

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # a JSON string literal, escapes included
_BRACKET = re.compile(r"[\[\]{}]")


class _NumberTooLong(ValueError):
    """An integer literal past MAX_INT_DIGITS: raised from inside json.loads, turned into a DataError."""


def _bounded_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise _NumberTooLong
    return int(literal)


def nesting_depth(line: str) -> int:
    """How deep arrays and objects nest in `line`, brackets inside string literals not counted. Linear in
    the line's length, without recursion; a line that is no JSON gets some count (json.loads refuses it)."""
    if line.count("[") + line.count("{") <= MAX_DEPTH:  # the common case: too few brackets to matter
        return 0
    depth = deepest = 0
    for bracket in _BRACKET.finditer(_STRING.sub('""', line)):
        depth += 1 if bracket.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def parse_row(line: str, path: Path, row: int) -> Any:
    """The JSON value of one line; DataError (naming `path` and `row`) for a line that is too long, nests
    too deeply, holds an over-long integer, or is no JSON."""
    if len(line) > MAX_LINE_CHARS:
        raise DataError(f"line longer than {MAX_LINE_CHARS} characters", file=path, row=row)
    if nesting_depth(line) > MAX_DEPTH:
        raise DataError(f"JSON nested deeper than {MAX_DEPTH} levels", file=path, row=row)
    try:
        return json.loads(line, parse_int=_bounded_int)
    except json.JSONDecodeError as e:
        raise DataError(f"invalid JSON: {e.msg} at column {e.colno}", file=path, row=row) from None
    except _NumberTooLong:
        raise DataError(f"a number longer than {MAX_INT_DIGITS} digits", file=path, row=row) from None
