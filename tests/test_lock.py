"""The lock files agree with pyproject.toml: every declared dependency is pinned, within its range.

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
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
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
