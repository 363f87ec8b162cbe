"""The README's first-hour walkthrough is extracted whole and in order (tests/support/walkthrough.py): the
blocks tests/integration/test_readme_walkthrough.py runs are the ones a newcomer reads."""

from __future__ import annotations

import pytest

from tests.support.walkthrough import (
    README,
    SECTION,
    WalkthroughError,
    blocks,
    readme_blocks,
    section,
    unmarked_shell_blocks,
)


def test_the_readme_walkthrough_is_found_in_order_and_not_empty() -> None:
    found = readme_blocks()
    assert [b.kind for b in found] == ["server", "run", "run", "run"], found
    assert found[0].commands() == ["make run"]
    assert all(b.commands() for b in found), "an empty walkthrough block"
    assert [b.line for b in found] == sorted(b.line for b in found)
    text = "\n".join(b.text for b in found[1:])
    # The order a newcomer needs: a team key exported before the submission, the job before its results.
    steps = ["export SMARTUNE_URL", "admin create-team", "submit examples/quick.yaml", "status", "results"]
    at = [text.find(step) for step in steps]
    assert -1 not in at and at == sorted(at), dict(zip(steps, at, strict=True))
    assert any(line.startswith("export SMARTUNE_API_KEY=") and "admin create-team" in line
               for line in text.splitlines())  # fmt: skip
    assert "admin-key" not in text  # the admin key belongs to no team: never the walkthrough's key


def test_every_shell_block_of_the_first_hour_is_marked() -> None:
    markdown = README.read_text(encoding="utf-8")
    first_hour = section(markdown)
    assert unmarked_shell_blocks(first_hour) == [], "a ```bash block in the walkthrough that no test runs"
    assert len(blocks(first_hour)) == len(readme_blocks()), "a walkthrough marker outside " + SECTION


def test_blocks_are_read_with_their_lines_and_kinds() -> None:
    markdown = "\n".join(
        [
            "# t",
            "<!-- walkthrough: server -->",
            "```bash",
            "make run",
            "```",
            "text",
            "```bash",
            "echo unmarked",
            "```",
            "<!-- walkthrough -->",
            "",
            "```sh",
            "# a comment",
            "export A=1",
            "echo $A",
            "```",
        ]
    )
    found = blocks(markdown)
    assert [(b.kind, b.line, b.commands()) for b in found] == [
        ("server", 3, ["make run"]),
        ("run", 12, ["export A=1", "echo $A"]),
    ]
    assert unmarked_shell_blocks(markdown) == [7]


@pytest.mark.parametrize(
    ("markdown", "said"),
    [
        ("<!-- walkthrough -->\ntext\n```bash\necho\n```", "must precede"),
        ("<!-- walkthrough -->\n```python\nprint()\n```", "must precede"),
        ("<!-- walkthrough -->\n```bash\necho", "never closed"),
        ("<!-- walkthrough: later -->\n```bash\necho\n```", "unknown walkthrough kind"),
        ("<!-- walkthrough -->", "must precede"),
    ],
)
def test_a_malformed_marker_is_an_error(markdown: str, said: str) -> None:
    with pytest.raises(WalkthroughError, match=said):
        blocks(markdown)


def test_the_section_ends_at_the_next_heading_of_its_level() -> None:
    markdown = "# t\n## Your first hour\na\n### sub\nb\n## Next\nc"
    assert section(markdown) == "## Your first hour\na\n### sub\nb"
    with pytest.raises(WalkthroughError, match="no section"):
        section("# t\n## Other")
