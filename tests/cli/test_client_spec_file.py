"""`smartune submit` reads YAML as YAML 1.2 reads numbers: `1e-4` is a number (PyYAML's YAML 1.1 would
make it a string, which the server, validating types strictly, refuses where a number goes)."""

from __future__ import annotations

from pathlib import Path

from cli.client_cmd import read_spec


def test_exponent_numbers_are_numbers(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(
        "training:\n  learning_rate: 1e-4\n  weight_decay: -3E-2\n  max_train_samples: 5e3\n"
        'name: "1e-4"\nseeds: [1, 2]\nratio: 1.5\ncount: 1_000\n'
    )
    assert read_spec(path) == {
        "training": {"learning_rate": 1e-4, "weight_decay": -0.03, "max_train_samples": 5000.0},
        "name": "1e-4",  # quoted: a string
        "seeds": [1, 2],
        "ratio": 1.5,
        "count": 1000,
    }


def test_the_safe_loader_still_refuses_python_tags(tmp_path: Path) -> None:
    import pytest

    path = tmp_path / "spec.yaml"
    path.write_text("x: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(ValueError, match="could not determine a constructor"):
        read_spec(path)
