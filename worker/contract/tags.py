"""The MLflow record both sides rely on: tag names, trial states and the run layout. Plain strings.

The sweep driver writes one parent run per job and one child run per trial; the control plane finds a
job's runs by `JOB` and reads each trial's state, attempt, cell and error class from these tags.
- parent: run name = job id; tags JOB, ATTEMPT, SPEC_HASH, KIND = "sweep"; the spec and, at the end,
  `summary.json` as artifacts.
- child: tags PARENT, JOB, TRIAL, ATTEMPT, STATE, ERROR_CLASS when failed, CELL (JSON of the cell's swept
  values); params = the resolved trial config (flat field names, as in the spec's axes); metrics per epoch
  with step = epoch; the best epoch's checkpoint under the artifact folder BEST_CHECKPOINT; once the trial
  has trained to its end, that checkpoint as an MLflow model of the transformers flavour (MODEL_URI,
  `models:/<model id>`; MODEL_ERROR when it could not be logged); the training data as a dataset input;
  `system/...` metrics; what the trial's Python code printed, the last 256 KiB of each start of its
  process, under TRIAL_OUTPUT as `start-NNN.txt` (worker.tune.trial_output; `output_file`).
- registry: the best trial's model of each task is this job's version of the team's registered model
  `smartune-<team>-<task>` (worker.contract.model_registry: its names and version tags); the parent run
  names it (REGISTERED_MODEL, REGISTERED_VERSION, or REGISTRY_ERROR).
"""

from __future__ import annotations

from typing import Literal

State = Literal["PENDING", "RUNNING", "TERMINATED", "ERROR", "STOPPED"]
STATES: tuple[State, ...] = ("PENDING", "RUNNING", "TERMINATED", "ERROR", "STOPPED")

PARENT = "mlflow.parentRunId"
JOB = "smartune.job_id"
TRIAL = "smartune.trial_id"
ATTEMPT = "smartune.attempt"
STATE = "smartune.state"
KIND = "smartune.kind"  # "sweep" on the parent run
SPEC_HASH = "smartune.spec_hash"
TEAM = "smartune.team"  # on the Ray job's metadata
CELL = "smartune.cell"
ERROR_CLASS = "smartune.error_class"
ERROR_MESSAGE = "smartune.error"
ERROR_ATTEMPT = "smartune.error_attempt"
STARTS = "smartune.starts"  # how many times the trial's process started (retries and resumes)
FAILURES = "smartune.failures"
LAST_ERROR_CLASS = "smartune.last_error_class"
RESUMED_FROM_EPOCH = "smartune.resumed_from_epoch"
RESTORE_NOTE = "smartune.restore_note"
BEST_CHECKPOINT_URI = "smartune.best_checkpoint"
BEST_EPOCH = "smartune.best_epoch"
BEST_CHECKPOINT = "best_checkpoint"  # the artifact folder of a child run: the best epoch's HF checkpoint
TRIAL_OUTPUT = "output"  # the artifact folder of a child run: what each start of the trial printed
PROVENANCE_PREFIX = "smartune.prov."
MODEL_URI = "smartune.model_uri"  # child: `models:/<id>`, the best checkpoint as a transformers-flavour model
MODEL_ERROR = "smartune.model_error"  # child: why that model could not be logged (the trial still counts)
REGISTERED_MODEL = "smartune.registered_model"  # parent: the registered model holding the best trial's model
REGISTERED_VERSION = "smartune.registered_version"  # parent: this job's version of it
REGISTRY_ERROR = "smartune.registry_error"  # parent: why the best trial's model could not be registered


def output_file(start: int) -> str:
    """The artifact path of what the trial's `start`-th start (1, 2, ...: STARTS) printed."""
    return f"{TRIAL_OUTPUT}/start-{start:03d}.txt"
