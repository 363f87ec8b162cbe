"""Every example spec in examples/ is a valid job spec, read the way `smartune sweep FILE` reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.contract.specfile import spec_from_file

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").rglob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_the_example_is_a_valid_spec(path: Path) -> None:
    spec = spec_from_file(path)
    assert spec.trials(), f"{path.name} expands to no trial"
