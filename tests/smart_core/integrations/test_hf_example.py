"""examples/hf_trainer_smart.py runs as a program: a plain Trainer + SMART on real RTE rows with the offline
MiniLM, printing the dev accuracy and SMART's components (integration tier: it starts a Python process)."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "hf_trainer_smart.py"


@pytest.mark.usefixtures("starts_processes")
def test_the_trainer_example_trains_minilm_with_smart(glue_dir: Path) -> None:
    env = {**os.environ, "SMARTUNE_GLUE_DIR": str(glue_dir), "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    args = ["--train-examples", "16", "--eval-examples", "16", "--max-length", "32", "--batch-size", "8"]
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["optimizer_steps"] == 2 and result["train_examples"] == 16  # 16 examples in batches of 8
    assert 0.0 <= result["dev_accuracy"] <= 1.0
    assert result["r_s"] > 0 and result["d_breg"] >= 0


def test_the_example_names_the_missing_glue_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main = runpy.run_path(str(EXAMPLE))["main"]
    with pytest.raises(SystemExit) as exit_info:
        main(["--glue-dir", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "SMARTUNE_GLUE_DIR" in capsys.readouterr().err
