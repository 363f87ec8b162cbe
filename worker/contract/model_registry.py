"""The model registry's names, shared by the sweep driver (which registers) and the control plane (which
provisions and lists): one registered model per team and task, collecting every job's version.

- name: `smartune-<team>-<task>` (other characters of the task's name as `-`; a team name is already
  `[a-z0-9][a-z0-9_.-]*`). A sweep run outside the service (`smartune sweep`) has no team: `local`.
- the alias `best` names the version with the best dev score among versions scored on the same dev set
  (worker.tune.model_alias); each version is tagged with the tags below.
- the registered model itself carries `smartune.team` and `smartune.task` (TEAM_TAG, TASK_TAG), by which
  the control plane lists a team's models: a name alone cannot say where the team ends (`a-b` + `rte` and
  `a` + `b-rte`).
Plain strings: no MLflow here.
"""

from __future__ import annotations

import re

PREFIX = "smartune"
ALIAS = "best"
LOCAL_TEAM = "local"  # the team of a sweep started by hand, outside the service
TEAM_ENV = "SMARTUNE_TEAM"  # the dispatcher tells the driver its job's team

# The registered model's tags.
TEAM_TAG = "smartune.team"
TASK_TAG = "smartune.task"
# Each version's tags (besides smartune.job_id, smartune.trial_id and smartune.spec_hash: worker.contract.tags).
DEV_SCORE = "smartune.dev_score"  # the trial's dev main metric at its best epoch (float as text)
MAIN_METRIC = "smartune.main_metric"  # which metric DEV_SCORE is (the task's main metric)
EVAL_ROWS = "smartune.eval_rows"  # digest of what picks the dev rows: equal digests, comparable scores
MAX_EVAL_SAMPLES = "smartune.max_eval_samples"  # readable part of EVAL_ROWS ("all" when unset)
ALIAS_NOTE = "smartune.alias_note"  # whether this version took `best`, and why (not)


def registered_model_name(team: str, task: str) -> str:
    """`smartune-<team>-<task>`: every job of `team` on `task` adds a version to it."""
    return f"{PREFIX}-{team}-{re.sub(r'[^A-Za-z0-9._-]', '-', task)}"
