"""How long this process has run: the start-up metrics of a sweep's driver and trials (issue 31).

The driver logs `driver_import_seconds` (its age when its modules are loaded) and `driver_ready_seconds`
(its age once Ray and MLflow are connected and the parent run is open) on the parent run; each trial logs
`worker_start_seconds` (its process's age when Tune first calls the trainable: Ray started the process and
unpickled the trainable, importing the training stack) on its run at step 0. `bench/job_startup.py` reads
them; docs/architecture.md §2, "Start-up", says what they showed.
"""

from __future__ import annotations

import os
import time


def process_age_s() -> float | None:
    """Seconds since this process was started (Linux: its start in /proc/self/stat, in clock ticks of
    10 ms, against the boot clock); None where /proc or the boot clock is missing."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # fields from 3 (state) on: starttime is field 22
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return None
