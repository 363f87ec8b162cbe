"""Driver-side Tune callback: the final verdict of each trial on its MLflow child run, as it happens.

The trial itself creates or reopens its run and marks it RUNNING (worker.tune.trainable); only the driver
sees how a trial ends: completed (TERMINATED), stopped early by ASHA or the time budget (STOPPED),
failed for good (ERROR with its class, including a killed process that could not report), or failed
and queued for a retry (PENDING, `smartune.failures` counted). The callback holds only plain data:
Tune pickles callbacks into its experiment state and reuses them when a sweep is restored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ray.tune import Callback
from ray.tune.experiment import Trial

from worker.contract.errors import classify
from worker.contract.tags import ERROR_CLASS, FAILURES, LAST_ERROR_CLASS, STATE
from worker.tune.outcomes import record_final_state
from worker.tune.tracking import TrackingTarget, set_tags, trial_run
from worker.tune.trial_error import trial_error
from worker.tune.tuning import AloneAfterOom as AloneAfterOom  # also here: see below
from worker.tune.tuning import TrialResolver, trial_state

# AloneAfterOom lives in worker.tune.tuning, but sweeps started at commit d22be34 pickled it under this
# module's path; it stays resolvable here so that their next attempt restores
# (tests/worker/tune/test_pickled_paths.py).

logger = logging.getLogger(__name__)


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
        resolved = self.resolver(trial.trial_id, trial.config)
        state = trial_state(status, done, resolved.planned_epochs)
        error, text = trial_error(trial) if state == "ERROR" else (None, "")
        client = self.target.client()
        record_final_state(
            client, self.target, self.parent_run_id, trial.trial_id, state, error, text, trial=resolved
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
