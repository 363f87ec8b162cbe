"""Tokenise once per sweep: the driver prepares each distinct trial data set and shares it through Ray.

A sweep's trials usually differ in hyperparameters and seeds, not in what they read: a grid of 48 SST-2
trials would otherwise read and tokenise the same 67k examples 48 times. `share_data(trials)` prepares
the data of every distinct `data_key` once (worker.training.prepared), puts each in Ray's object store and
returns key -> reference; the trainable fetches its own (see worker.tune.trainable.train_trial). A set the
driver cannot prepare is left out with a warning: its trials read it themselves and fail, if they do,
with their own error class, as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import ray

from worker.contract.tasks import get_task
from worker.contract.trial import TrainConfig
from worker.training.models import load_tokenizer
from worker.training.prepared import data_key, prepare_data

logger = logging.getLogger(__name__)


def share_data(trials: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """data_key -> ObjectRef of its PreparedData, for the grid's trial configs (`trial_configs`)."""
    started = time.perf_counter()
    refs: dict[str, Any] = {}
    tokenizers: dict[str, Any] = {}
    skipped: set[str] = set()
    for trial in trials:
        config = TrainConfig.from_dict(trial)
        key = data_key(config)
        if key in refs or key in skipped:
            continue
        try:
            if config.model not in tokenizers:
                tokenizers[config.model] = load_tokenizer(config.model)
            prepared = prepare_data(config, get_task(config.task), tokenizers[config.model])
        except Exception as err:
            skipped.add(key)
            logger.warning("the driver could not prepare %s (%s); its trials read it themselves", key, err)
            continue
        refs[key] = ray.put(prepared)
    logger.info(
        "prepared %d data set(s) for %d trial(s) in %.1f s",
        len(refs),
        len(trials),
        time.perf_counter() - started,
    )
    return refs
