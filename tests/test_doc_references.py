"""The Markdown docs reference only what a clone of the repository has (a clone has no ../shared).

For each doc (README.md, CHANGELOG.md, docs/*.md, research/README.md, bench/README.md and every README.md
under examples/ and deploy/): a relative link resolves to a file or folder git does not ignore, an
`#anchor` names a heading of the page it points to (GitHub's slugs), no link leaves the repository, every
`python -m <module>` in code names a module of the repository (or a known tool), every `make <target>` in
code a target of the Makefile. Fenced code is no link; prose is no command (only code spans and fenced
blocks are read for commands). The checks read files only.
"""

from __future__ import annotations

import fnmatch
import functools
import html
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC_GLOBS = (
    "README.md",
    "CHANGELOG.md",
    "docs/*.md",
    "research/README.md",
    "bench/README.md",
    "examples/**/README.md",
    "deploy/**/README.md",
)
DOCS = sorted({path for pattern in DOC_GLOBS for path in ROOT.glob(pattern)})
IDS = [doc.relative_to(ROOT).as_posix() for doc in DOCS]

# `python -m` of what is not this repository's: installed tools and the standard library's commands.
KNOWN_MODULES = {"pip", "pytest", "venv", "uvicorn", "mlflow", "ray", "http.server", "json.tool"}
# What the changelog records as removed ("`python -m smartune` is gone"): history, not an instruction.
REMOVED_MODULES = {"CHANGELOG.md": {"smartune"}}
PLACEHOLDER = re.compile(r"(?:^|\.)[A-Z](?:\.|$)")  # `python -m research.X`: any script of research/

FENCE = re.compile(r"^\s*(?P<fence>`{3,}|~{3,})")
HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
# A code span: a run of backticks, then text up to the same run (no blank line between: a span ends a paragraph).
CODE_SPAN = re.compile(
    r"(?<!`)(?P<ticks>`+)(?!`)(?P<code>(?:(?!\n\s*\n).)+?)(?<!`)(?P=ticks)(?!`)", re.DOTALL
)
LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]"  # [text] (one level of nested brackets), or ![alt] of an image
    r"\(\s*(?P<target><[^>\n]*>|[^\s)]+)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)"
)
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(?P<target><[^>\n]*>|\S+)", re.MULTILINE)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:|^//")  # http:, https:, mailto:, ... and //host
ATX = re.compile(r"^ {0,3}#{1,6}(?:[ \t]+(?P<text>.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(?:=+|-+)[ \t]*$")
INDENTED = re.compile(r"^(?: {4}|\t)")
# What GitHub keeps of a heading's text (Ruby's \p{Word}: letters, marks, decimal and letter numbers, `_`).
SLUG_CATEGORIES = {"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "Pc"}
PYTHON_M = re.compile(
    r"(?<![\w.-])python(?:\d+(?:\.\d+)?)?(?:\s+(?:-[XW]\s+\S+|-[A-Za-ln-z]+))*\s+-m\s+(?P<module>[A-Za-z_][\w.]*)"
)
MAKE = re.compile(r"(?<![\w./$-])make\s+(?P<args>[^;&|)#`]*)")
MAKE_OPTIONS_WITH_ARGUMENT = {"-o", "-C", "-f", "-I", "-W", "--file", "--directory", "--old-file"}
MAKE_RULE = re.compile(r"^(?P<targets>[^\s:#=$][^:#=\n]*?)[ \t]*::?(?!=)", re.MULTILINE)


@dataclass(frozen=True)
class Doc:
    prose: str  # the text outside fenced blocks, HTML comments and code spans (blanked, lines kept)
    code: list[tuple[int, str]]  # (line, text) of each fenced block's line and each code span
    headings: list[str]  # the headings' Markdown, in order


def _blank(text: str) -> str:
    """The text's characters as spaces, its line breaks kept: offsets and line numbers stay."""
    return re.sub(r"[^\n]", " ", text)


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _is_paragraph(line: str) -> bool:
    """Text of a paragraph at the top level: not blank, indented, a list item, table row, quote or heading."""
    return bool(line.strip()) and not re.match(r"^(?:\s|[#|>*+-]|\d+[.)]\s)", line)


def _opens_indented_code(lines: list[str], index: int) -> bool:
    """lines[index], indented by 4, starts a code block: it follows a blank line after a top-level paragraph
    (in a list, the same indentation continues the item)."""
    if not INDENTED.match(lines[index]) or (index and lines[index - 1].strip()):
        return False
    before = [line for line in lines[:index] if line.strip()]
    return not before or _is_paragraph(before[-1]) or bool(ATX.match(before[-1]))


def parse(markdown: str) -> Doc:
    prose: list[str] = []
    code: list[tuple[int, str]] = []
    headings: list[str] = []
    fence = ""  # the open fence's backticks or tildes
    indented = False  # in an indented code block
    lines = markdown.splitlines()
    for index, line in enumerate(lines):
        opened = FENCE.match(line)
        indented = indented and bool(INDENTED.match(line) or not line.strip())
        if fence and opened and opened["fence"][0] == fence[0] and len(opened["fence"]) >= len(fence):
            fence = ""  # a fence closes with the same character, at least as many of it
        elif opened and not fence and not indented:
            fence = opened["fence"]
        elif fence or indented or _opens_indented_code(lines, index):
            indented = not fence
            command, _, comment = line.partition(" #")  # a shell comment is prose: its code spans count
            code.append((index + 1, command))
            code += [(index + 1, span["code"]) for span in CODE_SPAN.finditer(comment)]
        else:
            prose.append(line)
            heading = ATX.match(line)
            if heading:
                headings.append(heading["text"] or "")
            elif SETEXT.match(line) and index and _is_paragraph(prose[index - 1]):
                headings.append(prose[index - 1].strip())
            continue
        prose.append("")
    text = HTML_COMMENT.sub(lambda comment: _blank(comment.group()), "\n".join(prose))
    code += [(_line(text, span.start()), span["code"]) for span in CODE_SPAN.finditer(text)]
    text = CODE_SPAN.sub(lambda span: _blank(span.group()), text)
    return Doc(prose=text, code=sorted(code), headings=headings)


def _rendered(markdown: str) -> str:
    """A heading's text as GitHub renders it: code spans' content, link and image text, no emphasis or tags."""
    out: list[str] = []
    at = 0
    for span in CODE_SPAN.finditer(markdown):
        out += [_strip_markup(markdown[at : span.start()]), span["code"].strip()]
        at = span.end()
    return "".join([*out, _strip_markup(markdown[at:])])


def _strip_markup(text: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = re.sub(r"(?<![\w\\])(_{1,3})(?=\S)(.+?)(?<=\S)\1(?!\w)", r"\2", text)  # _emphasis_, not snake_case
    text = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text)  # backslash escapes
    return html.unescape(text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its rendered text lower-cased, every character but letters, marks,
    digits, `_`, `-` and spaces dropped, each space a hyphen."""
    text = _rendered(heading).strip().lower()
    kept = [char for char in text if char in "- " or unicodedata.category(char) in SLUG_CATEGORIES]
    return "".join(kept).replace(" ", "-")


def anchors(headings: list[str]) -> list[str]:
    """The headings' anchors in order: a repeated slug gets -1, -2, ... as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = []
    for heading in headings:
        base = slug(heading)
        found.append(f"{base}-{seen[base]}" if base in seen else base)
        seen[base] = seen.get(base, 0) + 1
    return found


@dataclass(frozen=True)
class Link:
    line: int
    path: str  # "" for an anchor into the same page
    anchor: str  # "" for none


def links(doc: Doc) -> list[Link]:
    """The doc's local links (no scheme), URL-decoded: inline links, images and reference definitions."""
    found = []
    for match in [*LINK.finditer(doc.prose), *REFERENCE.finditer(doc.prose)]:
        target = match["target"].strip("<>")
        if SCHEME.match(target):
            continue
        path, _, anchor = target.partition("#")
        found.append(Link(_line(doc.prose, match.start()), unquote(path.split("?")[0]), unquote(anchor)))
    return sorted(found, key=lambda link: link.line)


def _resolve(source: Path, path: str) -> Path:
    base = ROOT if path.startswith("/") else source.parent  # GitHub: a leading slash is the repository's root
    return Path(os.path.normpath(base / path.lstrip("/")))


def _inside(path: Path) -> bool:
    return path == ROOT or ROOT in path.parents


def _ignored_patterns() -> list[str]:
    lines = (ROOT / ".gitignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith(("#", "!"))]


IGNORED = _ignored_patterns()


def _ignored(path: Path) -> bool:
    """Git ignores the path (the top .gitignore's patterns): it exists here, not in a clone."""
    relative = path.relative_to(ROOT).as_posix()
    parts = relative.split("/")
    for pattern in IGNORED:
        bare = pattern.strip("/")
        if "/" in pattern.rstrip("/"):  # anchored at the root: the path or a folder above it
            if any(fnmatch.fnmatchcase("/".join(parts[: i + 1]), bare) for i in range(len(parts))):
                return True
        elif any(fnmatch.fnmatchcase(part, bare) for part in parts):
            return True
    return False


def _modules(code: list[tuple[int, str]]) -> list[tuple[int, str]]:
    found = []
    for line, text in code:
        found += [(line, match["module"].rstrip(".")) for match in PYTHON_M.finditer(text)]
    return found


def _is_module(name: str) -> bool:
    base = ROOT.joinpath(*name.split("."))
    return base.with_name(base.name + ".py").is_file() or (base / "__main__.py").is_file()


def make_targets(code: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The targets each `make` in the code names: after its options and VAR=value assignments."""
    found = []
    for line, text in code:
        for match in MAKE.finditer(text):
            skip = False
            for word in match["args"].split():
                if skip:
                    skip = False
                elif word in MAKE_OPTIONS_WITH_ARGUMENT:
                    skip = True
                elif word.startswith("-") or "=" in word:
                    continue
                elif re.fullmatch(r"[A-Za-z0-9_][\w.-]*", word):
                    found.append((line, word))
                else:  # a redirection, a continuation, ...: the targets have ended
                    break
    return found


def _makefile_targets() -> set[str]:
    rules = MAKE_RULE.finditer((ROOT / "Makefile").read_text())
    return {target for rule in rules for target in rule["targets"].split()}


@functools.cache
def _parsed(doc: Path) -> Doc:
    return parse(doc.read_text(encoding="utf-8"))


def test_the_docs_are_found() -> None:
    assert {"README.md", "docs/architecture.md", "research/README.md", "bench/README.md"} <= set(IDS), IDS


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_relative_links_name_files_a_clone_has(doc: Path) -> None:
    bad = []
    for link in links(_parsed(doc)):
        target = _resolve(doc, link.path)
        if link.path and _inside(target) and (not target.exists() or _ignored(target)):
            bad.append(f"line {link.line}: {link.path}" + (" (git-ignored)" if target.exists() else ""))
    assert bad == [], f"{doc.relative_to(ROOT)}: links to what the repository lacks"


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_anchors_name_headings(doc: Path) -> None:
    bad = []
    for link in links(_parsed(doc)):
        target = _resolve(doc, link.path) if link.path else doc
        if link.anchor and target.suffix == ".md" and target.is_file() and _inside(target):
            if link.anchor not in anchors(_parsed(target).headings):
                bad.append(f"line {link.line}: {link.path}#{link.anchor}")
    assert bad == [], f"{doc.relative_to(ROOT)}: anchors no heading has"


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_no_link_leaves_the_repository(doc: Path) -> None:
    found = links(_parsed(doc))
    outside = [f"line {link.line}: {link.path}" for link in found if not _inside(_resolve(doc, link.path))]
    assert outside == [], f"{doc.relative_to(ROOT)}: links outside the repository (a clone has no ../shared)"


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_python_m_names_a_module(doc: Path) -> None:
    known = KNOWN_MODULES | REMOVED_MODULES.get(doc.relative_to(ROOT).as_posix(), set())
    found = _modules(_parsed(doc).code)
    bad = [f"line {line}: python -m {name}" for line, name in found
           if name not in known and not PLACEHOLDER.search(name) and not _is_module(name)]  # fmt: skip
    assert bad == [], f"{doc.relative_to(ROOT)}: modules neither in the repository nor known"


@pytest.mark.parametrize("doc", DOCS, ids=IDS)
def test_make_names_a_makefile_target(doc: Path) -> None:
    defined = _makefile_targets()
    found = make_targets(_parsed(doc).code)
    bad = [f"line {line}: make {target}" for line, target in found if target not in defined]
    assert bad == [], f"{doc.relative_to(ROOT)}: targets the Makefile lacks ({', '.join(sorted(defined))})"


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("The service: `smartune serve` and the REST API", "the-service-smartune-serve-and-the-rest-api"),
        ("10. Multi-task SMART (MT-DNN-SMART, paper §5.3)", "10-multi-task-smart-mt-dnn-smart-paper-53"),
        ("R_s at ε = 1e-5, 2 × 128 tokens", "r_s-at-ε--1e-5-2--128-tokens"),
        ("**Bold** and _emphasis_ in `smart_core`", "bold-and-emphasis-in-smart_core"),
        ("A [link](docs/spec.md) — then café", "a-link--then-café"),
    ],
)
def test_slugs_follow_github(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_repeated_headings_are_numbered() -> None:
    assert anchors(["Audits", "Set-up", "Audits", "Audits"]) == ["audits", "set-up", "audits-1", "audits-2"]


def test_links_and_commands_are_read_from_their_places() -> None:
    doc = parse(
        "\n".join(
            [
                "# Title",
                "See [a](a.md#x), `[not](code.md)` and [site](https://example.com).",
                "```bash",
                "make -o .venv/stamp run  # as `make test` does",
                "[no](link.md) python -X importtime -m bench.step",
                "```",
                "<!-- [hidden](gone.md) -->",
                "Run `python -m",
                "research.numerics.` or `UNIT_WORKERS=4 make test 2>&1`; make it so.",
                "",
                "Title",
                "=====",
                "",
                "    make lint  # an indented block after a paragraph is code: [not](a-link.md)",
                "",
                "- a list item",
                "",
                "    its second paragraph: make it [a link](b.md)",
            ]
        )
    )
    assert links(doc) == [Link(2, "a.md", "x"), Link(18, "b.md", "")]
    assert _modules(doc.code) == [(5, "bench.step"), (8, "research.numerics")]
    assert make_targets(doc.code) == [(4, "run"), (4, "test"), (9, "test"), (14, "lint")]
    assert anchors(doc.headings) == ["title", "title-1"]
