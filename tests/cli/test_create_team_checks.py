"""`smartune admin create-team` refuses a data root that does not exist (unless --force) and warns about a
quota above what the pool has ever offered, or that the pool was never read; the engine records the peak."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.main import main
from service.engine import pool_peak
from service.engine.rounds import Engine
from service.engine.scheduler import Resources


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("SMARTUNE_AUTOSCALER", raising=False)
    return tmp_path / "data"


def _create(data: Path, *flags: str) -> int:
    return main(["admin", "--data-dir", str(data), "create-team", "nlp", *flags])


def _teams(data: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["admin", "--data-dir", str(data), "list-teams"]) == 0
    return capsys.readouterr().out


def test_a_missing_data_root_is_refused_unless_forced(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "srv" / "nlp"
    assert _create(data, "--data-root", str(missing)) == 2
    err = capsys.readouterr().err
    assert f"--data-root {missing}: no such folder" in err and "--force" in err
    assert "nlp" not in _teams(data, capsys)  # nothing written
    assert _create(data, "--data-root", str(missing), "--force") == 0
    out = capsys.readouterr()
    assert out.out.startswith("smt_") and f"warning: --data-root {missing} does not exist yet" in out.err


def test_an_existing_data_root_passes_quietly(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "nlp"
    root.mkdir()
    assert _create(data, "--data-root", str(root)) == 0
    assert "warning" not in capsys.readouterr().err


def test_quotas_against_a_pool_never_read(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _create(data, "--gpus", "1") == 0
    assert "warning: the pool's size is unknown" in capsys.readouterr().err


def test_quotas_above_the_pools_peak_warn(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pool_peak.record(data, Resources(cpus=2, gpus=0))  # a CPU-only machine, as the issue's
    pool_peak.record(data, Resources(cpus=1, gpus=0))  # a smaller read later never lowers it
    assert _create(data, "--gpus", "1", "--cpus", "8") == 0
    err = capsys.readouterr().err
    assert "warning: --gpus 1 exceeds the most GPUs the pool has ever offered (0;" in err
    assert "warning: --cpus 8 exceeds the most CPUs the pool has ever offered (2;" in err
    assert main(["admin", "--data-dir", str(data), "create-team", "cv", "--cpus", "2", "--gpus", "0"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_the_engine_records_the_largest_pool_it_read(engine: Engine) -> None:
    engine.refresh_capacity(force=True)
    peak = pool_peak.read(engine.settings.data_dir)
    assert peak is not None and (peak.cpus, peak.gpus) == tuple(engine.capacity or ())
