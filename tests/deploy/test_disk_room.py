"""The compose stack test's disk check (tests/support/docker_engine.py): it builds where the images leave the
disk under Ray's 95% line, skips with the numbers where they would not, and asks less of a warm rebuild."""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path

import pytest

from tests.support import docker_engine
from tests.support.docker_engine import (
    COLD_BUILD_BYTES,
    WARM_BUILD_BYTES,
    EngineUnavailable,
    check_disk_room,
)

Usage = namedtuple("Usage", "total used free")
GIB = 1 << 30


def _disk(
    monkeypatch: pytest.MonkeyPatch, free_gib: float, total_gib: float = 252, cached: bool = False
) -> None:
    usage = Usage(int(total_gib * GIB), int((total_gib - free_gib) * GIB), int(free_gib * GIB))
    monkeypatch.setattr(docker_engine.shutil, "disk_usage", lambda _path: usage)
    monkeypatch.setattr(docker_engine, "image_exists", lambda _tag: cached)


def test_a_cold_build_that_leaves_five_percent_free_goes_ahead(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _disk(monkeypatch, free_gib=252 * 0.05 + COLD_BUILD_BYTES / GIB + 0.1)
    check_disk_room(["a", "b"], tmp_path)


def test_a_cold_build_on_a_nearly_full_disk_is_refused_with_the_numbers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _disk(monkeypatch, free_gib=252 * 0.05 + COLD_BUILD_BYTES / GIB - 0.1)
    with pytest.raises(
        EngineUnavailable, match=r"has 20\.5 GiB free of 252 GiB.*about 8 GiB.*12\.6 GiB \(5%\)"
    ):
        check_disk_room(["a", "b"], tmp_path)


def test_a_warm_rebuild_asks_for_less(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    room = 252 * 0.05 + WARM_BUILD_BYTES / GIB + 0.1  # enough for a rebuild, short of a cold build
    _disk(monkeypatch, free_gib=room, cached=True)
    check_disk_room(["a", "b"], tmp_path)
    _disk(monkeypatch, free_gib=room - 0.2, cached=True)
    with pytest.raises(EngineUnavailable, match=r"about 3 GiB"):
        check_disk_room(["a", "b"], tmp_path)
    _disk(monkeypatch, free_gib=room, cached=False)
    with pytest.raises(EngineUnavailable):
        check_disk_room(["a", "b"], tmp_path)
