"""research.kernel_profile: one profiled step per method (tiny random BERT on CPU, its dry run)."""

from __future__ import annotations

import json
from pathlib import Path

from research import kernel_profile


def test_each_method_gets_its_profiled_step_and_ratios(tmp_path: Path) -> None:
    out = tmp_path / "profile.json"
    assert kernel_profile.main(["--out", str(out), "--model", "tiny-random", "--batch-size", "2", "--seq-len", "16",
                                "--device", "cpu", "--warmup", "1",
                                "--methods", "vanilla,smart-breg-only,nonsense"]) == 0  # fmt: skip
    result = json.loads(out.read_text())
    rows = result["methods"]
    assert result["setup"]["device"] == "cpu" and result["setup"]["seq_len"] == 16
    assert rows["vanilla"]["wall_ratio"] == 1.0 and rows["vanilla"]["host_op_ratio"] == 1.0
    assert rows["vanilla"]["kernels"] == 0 and rows["vanilla"]["busy_share"] is None  # no device here
    # the teacher's forward adds host ops; the top ops come most frequent first
    assert rows["smart-breg-only"]["host_aten_ops"] > rows["vanilla"]["host_aten_ops"] > 0
    assert rows["vanilla"]["top_host_ops"][0][1] >= rows["vanilla"]["top_host_ops"][-1][1]
    assert "unknown method" in rows["nonsense"]["error"]  # one method's failure does not stop the others
