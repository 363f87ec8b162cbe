"""`smartune sweep`: spec files with errors are one line naming the field or the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.main import main


def test_smartune_sweep_reports_yaml_errors_with_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: rte\nsearch_space:\n  axes:\n    batch_size: {type: grid, values: []}\n")
    assert main(["sweep", str(bad)]) == 2
    assert "search_space.axes.batch_size" in capsys.readouterr().err
    broken = tmp_path / "broken.yaml"
    broken.write_text("task: rte\ntraining: {epochs: 2]\n")
    assert main(["sweep", str(broken)]) == 2
    assert "line 2" in capsys.readouterr().err
    good = tmp_path / "good.yaml"
    good.write_text("task: rte\n")
    assert main(["sweep", str(good), "--job-id", "../escape"]) == 2
    assert "--job-id" in capsys.readouterr().err
