"""Driver-side Tune callback: the final verdict of each trial on its MLflow child run, as it happens.

The trial itself creates or reopens its run and marks it RUNNING (worker.tune.trainable); only the driver
sees how a trial ends: completed (TERMINATED), stopped early by ASHA or the time budget (STOPPED),
failed for good (ERROR with its class, including a killed process that could not report), or failed
and queued for a retry (PENDING, `smartune.failures` counted). The callback holds only plain data:
Tune pickles callbacks into its experiment state and reuses them when a sweep is restored.
`AloneAfterOom` gives a trial that ran out of memory the whole device for its retry
(worker.tune.tuning.alone).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ray import cloudpickle
from ray.tune import Callback
from ray.tune.experiment import Trial

from worker.contract.errors import classify
from worker.contract.tags import ERROR_CLASS, FAILURES, LAST_ERROR_CLASS, STATE
from worker.tune.outcomes import record_final_state
from worker.tune.tracking import TrackingTarget, set_tags, trial_run
from worker.tune.tuning import TrialResolver, trial_state

logger = logging.getLogger(__name__)


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


class TrialStateCallback(Callback):
    def __init__(self, target: TrackingTarget, parent_run_id: str, resolver: TrialResolver) -> None:
        self.target, self.parent_run_id, self.resolver = target, parent_run_id, resolver

    def _safely(self, action: Callable[..., Any], trial: Trial, *args: Any) -> None:
        """Tracking problems must not stop the sweep; the driver reconciles every run after fit()."""
        try:
            action(trial, *args)
        except Exception:
            logger.exception("could not update the MLflow run of trial %s", trial.trial_id)

    def _final(self, trial: Trial, status: str) -> None:
        done = int(trial.last_result.get("epoch", 0) or 0)
        state = trial_state(status, done, self.resolver(trial.trial_id, trial.config).planned_epochs)
        error, text = trial_error(trial) if state == "ERROR" else (None, "")
        record_final_state(
            self.target.client(), self.target, self.parent_run_id, trial.trial_id, state, error, text
        )

    def _retrying(self, trial: Trial) -> None:
        client = self.target.client()
        run = trial_run(client, self.target, trial.trial_id)
        if run is None:
            return
        recorded = run.data.tags.get(ERROR_CLASS)  # set by the trial when it saw the exception itself
        last = recorded or classify(*trial_error(trial))
        failures = int(run.data.tags.get(FAILURES, "0")) + 1
        tags = {STATE: "PENDING", FAILURES: failures, LAST_ERROR_CLASS: last}
        set_tags(client, run.info.run_id, tags)

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._safely(self._final, trial, Trial.TERMINATED)  # Tune sets the status just after this call

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._safely(self._final, trial, Trial.ERROR)

    def on_trial_recover(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._safely(self._retrying, trial)


class AloneAfterOom(Callback):
    """A trial that failed with class `oom` and is about to be retried gets the `alone` request, and keeps
    it. Tune calls this after it requeued the trial (PENDING), when its resources may change. Plain data:
    Tune pickles callbacks into its experiment state."""

    def __init__(self, request: Mapping[str, float]) -> None:
        self.request = dict(request)

    def on_trial_recover(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        if classify(*trial_error(trial)) != "oom":
            return
        logger.warning("trial %s ran out of memory: retried alone with %s", trial.trial_id, self.request)
        trial.update_resources(self.request)
