"""AcceleratedSmart (smart_core.integrations.accelerated) on two CPU processes (gloo, accelerate's
`debug_launcher`) against one process with the whole batch: the same weights and teacher after two optimiser
steps. Exact because nothing random differs: no dropout, and each process draws R_s's noise for its rows
from the stream the single process draws the whole batch's from (process 1 skips process 0's rows: torch
draws normals in blocks of 16, and every (4, 16, H) block is a multiple). Two processes: integration tier."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from accelerate.state import AcceleratorState

from tests.smart_core.integrations.accelerated_run import train
from tests.smart_core.integrations.hf_setup import fresh_model, parameters, train_config
from tests.support.cluster import REPO

pytestmark = pytest.mark.usefixtures("starts_processes")  # the two processes run in a child interpreter
LAUNCH_TIMEOUT_S = 300  # about 15 s here; a hang fails in minutes, not at pytest's limit


@pytest.mark.parametrize("method", ["smart", "r3f"])
def test_two_processes_with_half_batches_match_one_with_the_whole(tmp_path: Path, method: str) -> None:
    two = tmp_path / "two.pt"
    module = "tests.smart_core.integrations.accelerated_run"
    subprocess.run(
        [sys.executable, "-m", module, str(two), method], cwd=REPO, check=True, timeout=LAUNCH_TIMEOUT_S
    )
    one = tmp_path / "one.pt"
    try:
        train(str(one), method)
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    a: dict[str, Any] = torch.load(one, weights_only=True)
    b: dict[str, Any] = torch.load(two, weights_only=True)
    initial = parameters(fresh_model(train_config(method=method, dropout=0.0)))
    assert any(not torch.equal(initial[k], v) for k, v in a["weights"].items())  # the steps moved them
    for name, value in a["weights"].items():
        torch.testing.assert_close(b["weights"][name], value, rtol=1e-5, atol=1e-6, msg=name)
    assert len(a["shadow"]) == len(b["shadow"]) == (0 if method == "r3f" else len(a["weights"]))
    for ours, theirs in zip(b["shadow"], a["shadow"], strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
