"""The code version a run records (worker.training.provenance.code_version): the checkout's commit, read
with `git` (two processes; the unit tier records a fixed commit instead, tests/conftest.py), or without a
checkout the package version and a hash of the sources."""

from __future__ import annotations

import re
import subprocess
from types import SimpleNamespace

import pytest

from worker.training import provenance
from worker.training.provenance import code_version  # the real one: the unit tier replaces the attribute


@pytest.mark.usefixtures("starts_processes")  # `git rev-parse`, `git status`
def test_a_checkout_records_its_commit_and_whether_it_is_dirty() -> None:
    version = code_version()
    if "git_commit" not in version:
        pytest.skip("not run from a git checkout")
    assert re.fullmatch(r"[0-9a-f]{40}", version["git_commit"]) and isinstance(version["git_dirty"], bool)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=provenance._ROOT, capture_output=True, text=True)
    assert version["git_commit"] == head.stdout.strip()


def test_without_git_the_package_version_and_a_hash_of_the_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_git(*_args: object, **_kwargs: object) -> None:
        raise FileNotFoundError("git")

    monkeypatch.setattr(
        provenance, "subprocess", SimpleNamespace(run=no_git, SubprocessError=subprocess.SubprocessError)
    )
    version = code_version()
    assert set(version) == {"package_version", "source_sha256"}
    assert re.fullmatch(r"[0-9a-f]{64}", version["source_sha256"])
