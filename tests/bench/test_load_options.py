"""`smartune bench load --ray-address`: the address reaches the service the benchmark starts, for the crowd
and for the noisy neighbour (the real runs: tests/integration/test_load_bench.py, on a Ray head)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import bench.load
import bench.noisy_neighbour
from cli.main import build_parser


class _Started(Exception):
    """Raised by the stand-in for `serve`: the test needs only what the service would have been given."""


KEYS = {bench.load: ("admin", [("t", "k")]), bench.noisy_neighbour: ("admin", [("t", "k")], [("n", "k")])}


def _capture(monkeypatch: pytest.MonkeyPatch, module: Any) -> dict[str, Any]:
    """The benchmark's keys made without a store, and the environment its `serve` would get."""
    seen: dict[str, Any] = {}

    def serve(data_dir: Path, *, env: dict[str, str] | None = None, **_options: Any) -> None:
        seen.update(env or {})
        raise _Started

    monkeypatch.setattr(module, "serve", serve)
    monkeypatch.setattr(module, "_keys", lambda *_args: KEYS[module])
    return seen


@pytest.mark.parametrize("module", [bench.load, bench.noisy_neighbour], ids=["crowd", "noisy-neighbour"])
def test_the_ray_address_reaches_the_service(monkeypatch: pytest.MonkeyPatch, module: Any) -> None:
    seen = _capture(monkeypatch, module)
    argv = ["bench", "load", "--ray-address", "http://10.0.0.5:8265", "--seconds", "1"]
    argv += ["--noisy-neighbour"] if module is bench.noisy_neighbour else []
    args = build_parser().parse_args(argv)
    with pytest.raises(_Started):
        module.main(args)
    assert seen["RAY_ADDRESS"] == "http://10.0.0.5:8265"


def test_without_it_the_service_starts_a_head_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _capture(monkeypatch, bench.load)
    with pytest.raises(_Started):
        bench.load.main(build_parser().parse_args(["bench", "load", "--seconds", "1"]))
    assert "RAY_ADDRESS" not in seen  # `serve` drops an inherited one too (bench/launch.py)
