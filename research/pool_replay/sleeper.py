"""The replay's trial: it sleeps its `sleep_s` and reports when it slept (wall-clock seconds since the epoch).

Kept apart from the driver (research/pool_replay/sleep_sweep.py) so that a trial's process imports Ray and
nothing else: no MLflow, no torch. Its cost is what Ray itself costs a trial.
"""

from __future__ import annotations

import time
from typing import Any

from ray import tune


def sleep_trial(config: dict[str, Any]) -> None:
    """One trial: sleep, then report the sleep's start and end (Tune's function API)."""
    started = time.time()
    time.sleep(float(config["trial"]["sleep_s"]))
    tune.report({"sleep_start": started, "sleep_end": time.time(), "score": 1.0})
