"""The lock files agree with pyproject.toml: every declared dependency is pinned, within its range; and
docs/dependencies.md lists each dependency group (what an image installs) as pyproject.toml declares it.

`make lock` writes requirements.lock (the runtime and the PostgreSQL driver: what the images install) and
requirements-dev.lock (everything `make install` installs) from pyproject.toml's ranges; a range changed
without re-locking fails here, naming the package. torch is pinned in pyproject.toml and left out of both.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
PIN = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s;]+)")


def _pins(lock: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / lock).read_text().splitlines():
        match = PIN.match(line)
        if match:
            pins[canonicalize_name(match.group(1).split("[")[0])] = match.group(2)
    return pins


def _declared(extras: tuple[str, ...]) -> list[Requirement]:
    lines = list(PROJECT["dependencies"])
    for extra in extras:
        lines += PROJECT["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


@pytest.mark.parametrize(
    ("lock", "extras"),
    [("requirements.lock", ("postgres",)), ("requirements-dev.lock", ("dev", "bench", "postgres"))],
)
def test_every_declared_dependency_is_pinned_within_its_range(lock: str, extras: tuple[str, ...]) -> None:
    pins = _pins(lock)
    assert "torch" not in pins  # its builds live on different indexes: pyproject.toml pins it
    problems = []
    for requirement in _declared(extras):
        name = canonicalize_name(requirement.name)
        if name == "torch":
            continue
        if name not in pins:
            problems.append(f"{requirement.name}: not in {lock}")
        elif not requirement.specifier.contains(pins[name], prereleases=True):
            problems.append(f"{requirement.name}: {lock} pins {pins[name]}, outside {requirement.specifier}")
    assert not problems, "run `make lock`:\n" + "\n".join(problems)


def _documented_group(group: str) -> set[str]:
    """The packages docs/dependencies.md lists under "### The `GROUP` group": its table's first column."""
    text = (ROOT / "docs" / "dependencies.md").read_text()
    heading = f"### The `{group}` group\n"
    assert heading in text, f"docs/dependencies.md has no section {heading.strip()!r}"
    section = text.split(heading, 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]  # past the header and rule
    return {canonicalize_name(name.strip()) for row in rows for name in row.split("|")[1].split(",")}


@pytest.mark.parametrize("group", sorted(PYPROJECT["dependency-groups"]))
def test_docs_list_each_dependency_group_as_pyproject_declares_it(group: str) -> None:
    declared = {canonicalize_name(Requirement(line).name) for line in PYPROJECT["dependency-groups"][group]}
    documented = _documented_group(group)
    assert documented == declared, (
        f"docs/dependencies.md's `{group}` group: missing {sorted(declared - documented)}, "
        f"not in pyproject.toml {sorted(documented - declared)}"
    )
