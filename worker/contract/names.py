"""Names that people read (a job's, a team's, a dataset's): no character that changes how text displays.

A right-to-left override (U+202E) makes `job-exe.txt` display as `job-txt.exe`; a zero-width space
(U+200B) makes two names that look the same differ; the bidirectional isolates (U+2066-2069) reorder what
follows them on the dashboard and in the CLI's tables. Every name is checked by this one rule, wherever it
is validated (the job spec, team creation, dataset uploads, API keys), and so is other text a team sets
that others read (a dataset's description, a webhook's URL): it refuses the Unicode categories Cc
(control: tabs, newlines, escapes), Cf (format: the overrides, isolates, zero-width characters, the BOM),
Cs (lone surrogates), Zl and Zp (line and paragraph separators). The error names the code point, never
echoes the character.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from pydantic import BeforeValidator

HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_KINDS = {
    "Cc": "control",
    "Cf": "format",
    "Cs": "surrogate",
    "Zl": "line separator",
    "Zp": "paragraph separator",
}


def hidden_character(text: str) -> str | None:
    """The first character of `text` that changes how it displays, as `U+XXXX (kind)`; None if none."""
    for char in text:
        category = unicodedata.category(char)
        if category in HIDDEN_CATEGORIES:
            return f"U+{ord(char):04X} ({_KINDS[category]} character)"
    return None


def check_display_name(text: str, what: str = "name") -> str:
    """`text` unchanged, or ValueError naming the first control or format character it holds (`what`: the
    kind of text, for the message: a name, a description)."""
    if found := hidden_character(text):
        raise ValueError(f"contains {found}; a {what} must display as it is stored")
    return text


def _before(value: object) -> object:
    """Strings are checked before any other rule (a pattern's refusal would not say why); other types are
    left to the field's own validation."""
    return check_display_name(value) if isinstance(value, str) else value


# Put in a field's Annotated[...]: `name: Annotated[str, DISPLAY_NAME] = Field(...)`.
DISPLAY_NAME = BeforeValidator(_before)


def _before_url(value: object) -> object:
    return check_display_name(value, "URL") if isinstance(value, str) else value


# The same for a field that holds a URL: the message says "a URL must display as it is stored".
DISPLAY_URL = BeforeValidator(_before_url)


# The same categories as code point ranges (Unicode 14, Python 3.11's unicodedata), written out: deriving
# them walks every code point (about a second). tests/worker/contract/test_names.py derives them again.
HIDDEN_RANGES: tuple[tuple[int, int], ...] = (
    (0x0000, 0x001F), (0x007F, 0x009F), (0x00AD, 0x00AD), (0x0600, 0x0605), (0x061C, 0x061C),
    (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x180E, 0x180E),
    (0x200B, 0x200F), (0x2028, 0x202E), (0x2060, 0x2064), (0x2066, 0x206F), (0xD800, 0xDFFF),
    (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x13438),
    (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001), (0xE0020, 0xE007F),
)  # fmt: skip


def _in_class(code: int) -> str:
    """`code` in a character class that Python's `re`, ECMA-262 (the `u` flag) and Rust's regex engines (the
    document's readers: schemathesis) all read the same: \\uXXXX in the BMP, else the character itself."""
    return f"\\u{code:04x}" if code <= 0xFFFF else chr(code)


# A regular expression that finds a refused character: one character class. Lone surrogates are left out
# (no engine but Python's can name them, and UTF-8 text cannot hold them); the check refuses them all the same.
HIDDEN_PATTERN = (
    "["
    + "".join(
        _in_class(a) if a == b else f"{_in_class(a)}-{_in_class(b)}" for a, b in HIDDEN_RANGES if a != 0xD800
    )
    + "]"
)


def no_hidden_character(schema: dict[str, Any]) -> None:
    """A field's JSON Schema (`Field(json_schema_extra=no_hidden_character)`) says its string may hold none:
    `not: {pattern: HIDDEN_PATTERN}` on the string, inside `anyOf` for an optional field (there, beside
    `null`, it would refuse null too; and `not: {type: string, ...}` beside `type: string` is more than
    schemathesis' generator can solve)."""
    strings = [branch for branch in schema.get("anyOf", []) if branch.get("type") == "string"]
    for target in strings or [schema]:
        target["not"] = {"pattern": HIDDEN_PATTERN}
