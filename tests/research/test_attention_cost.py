"""`python -m research.attention_cost` on the tiny model: three timed arms, and the step's attention put back."""

from __future__ import annotations

import smart_core.linearized
import smart_core.objective
from research.attention_cost import measure
from smart_core.attention import LightAttention


def test_times_three_arms_and_restores_the_attention() -> None:
    result = measure("tiny-random", batch_size=2, seq_len=16, rounds=1)
    assert set(result["step_s"]) == {"vanilla", "light", "math"}  # type: ignore[arg-type]
    assert all(s > 0 for s in result["step_s"].values())  # type: ignore[attr-defined]
    assert smart_core.objective.LightAttention is LightAttention
    assert smart_core.linearized.LightAttention is LightAttention
    assert smart_core.objective.runs_compiled.__name__ == "runs_compiled"  # the math arm's stand-in is gone
