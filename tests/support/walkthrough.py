"""The README's first-hour walkthrough as data: its marked command blocks, in order.

A block is marked by an HTML comment on the line before its fence (a comment renders as nothing):

    <!-- walkthrough -->            a block the test runs as it is written, in one shell, in order
    <!-- walkthrough: server -->    the block that starts the service (`make run`): the test starts it in
                                    the background and waits for it to answer, then runs the others

tests/test_readme_walkthrough.py checks the extraction; tests/integration/test_readme_walkthrough.py runs
the blocks against a real server."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Your first hour"  # the walkthrough's heading: every shell block under it is marked
MARKER = re.compile(r"^<!-- walkthrough(?::\s*(?P<kind>[a-z]+))? -->\s*$")
FENCE = re.compile(r"^```(?P<info>[^`]*)$")
SHELLS = ("bash", "sh", "shell")
KINDS = ("run", "server")


class WalkthroughError(ValueError):
    """The README's markers or fences are malformed (a marker without a block, an unclosed fence)."""


@dataclass(frozen=True)
class Block:
    kind: str  # "run" (executed in the walkthrough's shell) or "server" (started in the background)
    text: str  # the block's lines, without its fences
    line: int  # 1-based line of the opening fence in the README

    def commands(self) -> list[str]:
        """The block's lines that do something: neither blank nor a whole-line comment."""
        lines = (line.strip() for line in self.text.splitlines())
        return [line for line in lines if line and not line.startswith("#")]


def _is_shell(info: str) -> bool:
    """A fence's info string names a shell language (```bash, ```sh ...)."""
    words = info.split()
    return bool(words) and words[0] in SHELLS


def blocks(markdown: str) -> list[Block]:
    """The marked blocks of `markdown`, in document order."""
    lines = markdown.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        marker = MARKER.match(lines[i].strip())
        i += 1
        if not marker:
            continue
        kind = marker.group("kind") or "run"
        if kind not in KINDS:
            raise WalkthroughError(f"line {i}: unknown walkthrough kind {kind!r} (known: {', '.join(KINDS)})")
        while i < len(lines) and not lines[i].strip():
            i += 1
        fence = FENCE.match(lines[i].strip()) if i < len(lines) else None
        if not fence or not _is_shell(fence.group("info")):
            raise WalkthroughError(f"line {i}: a walkthrough marker must precede a ```bash block")
        start = i + 1  # 1-based line of the opening fence
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise WalkthroughError(f"line {start}: the walkthrough block is never closed")
        i += 1
        found.append(Block(kind=kind, text="\n".join(body), line=start))
    return found


def section(markdown: str, heading: str = SECTION) -> str:
    """The text under `heading` up to the next heading of the same or a higher level."""
    lines = markdown.splitlines()
    level = len(heading) - len(heading.lstrip("#"))
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == heading)
    except StopIteration:
        raise WalkthroughError(f"no section {heading!r}") from None
    end = len(lines)
    for j in range(start + 1, len(lines)):
        hashes = len(lines[j]) - len(lines[j].lstrip("#"))
        if 0 < hashes <= level and lines[j][hashes : hashes + 1] == " ":
            end = j
            break
    return "\n".join(lines[start:end])


def unmarked_shell_blocks(markdown: str) -> list[int]:
    """Line numbers (within `markdown`) of shell fences with no walkthrough marker before them."""
    lines = markdown.splitlines()
    missing = []
    in_fence = False
    for i, line in enumerate(lines):
        fence = FENCE.match(line.strip())
        if not fence:
            continue
        if in_fence:
            in_fence = line.strip() != "```"
            continue
        in_fence = True
        if _is_shell(fence.group("info")):
            before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            if not MARKER.match(before):
                missing.append(i + 1)
    return missing


def readme_blocks() -> list[Block]:
    return blocks(README.read_text(encoding="utf-8"))
