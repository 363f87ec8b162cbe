"""The one rule for text people read (worker.contract.names): the written-out ranges that documents state are
exactly the refused categories, and the pattern finds a character exactly when the check refuses it."""

from __future__ import annotations

import re
import sys
import unicodedata

import pytest

from worker.contract.names import HIDDEN_CATEGORIES, HIDDEN_PATTERN, HIDDEN_RANGES, check_display_name


def test_the_written_out_ranges_are_the_refused_categories() -> None:
    derived: list[tuple[int, int]] = []
    for code in range(sys.maxunicode + 1):
        if unicodedata.category(chr(code)) in HIDDEN_CATEGORIES:
            if derived and derived[-1][1] == code - 1:
                derived[-1] = (derived[-1][0], code)
            else:
                derived.append((code, code))
    assert tuple(derived) == HIDDEN_RANGES, (
        f"regenerate HIDDEN_RANGES for Unicode {unicodedata.unidata_version}"
    )


@pytest.mark.parametrize(
    "text",
    ["ci pipeline", "é ü 中文 🙂", "a\u202eb", "a\u200bb", "\u2066x", "x\n", "\t", "\x7f", "\ufeff", "a\U000e0001",
     "a\u2028", "\u00ad", "trailing "],
)  # fmt: skip
def test_the_pattern_finds_a_character_exactly_when_the_check_refuses(text: str) -> None:
    try:
        check_display_name(text)
    except ValueError:
        refused = True
    else:
        refused = False
    assert (re.search(HIDDEN_PATTERN, text) is not None) == refused


def test_the_message_names_the_kind_of_text() -> None:
    with pytest.raises(
        ValueError, match=r"contains U\+202E \(format character\); a description must display"
    ):
        check_display_name("x\u202e", "description")


def test_the_pattern_is_read_alike_by_the_documents_rust_readers() -> None:
    """schemathesis canonicalises schemas with jsonschema_rs (Rust regex): a pattern it cannot read (a lone
    surrogate, Python's \\U escape) became `not: {}`, and the field could not be generated at all."""
    jsonschema_rs = pytest.importorskip("jsonschema_rs")
    schema = {"type": "string", "not": {"pattern": HIDDEN_PATTERN}}
    assert jsonschema_rs.canonicalize(schema).satisfiability() is jsonschema_rs.canonical.Satisfiability.YES
    validator = jsonschema_rs.validator_for(schema)
    for text in ("ci pipeline", "é ü 中文 🙂", "a\u202eb", "x\n", "a\U000e0001", "\U0001d173", "x\ufeff"):
        assert validator.is_valid(text) == (re.search(HIDDEN_PATTERN, text) is None), repr(text)
