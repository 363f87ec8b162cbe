"""Names that people read (a job's, a team's, a dataset's): no character that changes how text displays.

A right-to-left override (U+202E) makes `job-exe.txt` display as `job-txt.exe`; a zero-width space
(U+200B) makes two names that look the same differ; the bidirectional isolates (U+2066-2069) reorder what
follows them on the dashboard and in the CLI's tables. Every name is checked by this one rule, wherever it
is validated (the job spec, team creation, dataset uploads): it refuses the Unicode categories Cc
(control: tabs, newlines, escapes), Cf (format: the overrides, isolates, zero-width characters, the BOM),
Cs (lone surrogates), Zl and Zp (line and paragraph separators). The error names the code point, never
echoes the character.
"""

from __future__ import annotations

import unicodedata

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


def check_display_name(text: str) -> str:
    """`text` unchanged, or ValueError naming the first control or format character it holds."""
    if found := hidden_character(text):
        raise ValueError(f"contains {found}; a name must display as it is stored")
    return text


def _before(value: object) -> object:
    """Strings are checked before any other rule (a pattern's refusal would not say why); other types are
    left to the field's own validation."""
    return check_display_name(value) if isinstance(value, str) else value


# Put in a field's Annotated[...]: `name: Annotated[str, DISPLAY_NAME] = Field(...)`.
DISPLAY_NAME = BeforeValidator(_before)
