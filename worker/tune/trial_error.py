"""A Tune trial's last error as the driver can read it: the exception if it unpickles, and its text.

Read by the driver's callbacks (worker.tune.callbacks: the error class on the trial's run) and by
worker.tune.tuning.AloneAfterOom (a trial that ran out of memory is retried alone).
"""

from __future__ import annotations

from pathlib import Path

from ray import cloudpickle
from ray.tune.experiment import Trial


def trial_error(trial: Trial) -> tuple[BaseException | None, str]:
    """The trial's last error: the exception (if it unpickles) and its text. Read from the driver's
    local copy first (written at once), then from the storage path (synced later)."""
    error: BaseException | None = None
    text = ""
    try:
        local = trial.pickled_error_file
        if local and Path(local).is_file():
            error = cloudpickle.loads(Path(local).read_bytes())
        elif trial.error_file and Path(trial.error_file).is_file():
            text = Path(trial.error_file).read_text(errors="replace")
        else:
            error = trial.get_pickled_error()
            text = str(trial.get_error() or "")
    except Exception:  # an exception class that does not unpickle here, a storage hiccup
        pass
    return error, text
