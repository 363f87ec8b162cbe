"""Transformers' per-load report, held back while a checkpoint loads and re-stated with what matters.

transformers 5 logs a "LOAD REPORT" table (a warning) and shows a "Loading weights" bar on every
``from_pretrained``; fitting a new task head makes that table list keys that are missing or resized by
design. :func:`quiet_loading` holds both back and :func:`report_load` re-states the report at the level
each finding deserves, so a job log warns only about what is worth a look (used by worker.training.models).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from transformers.utils import logging as hf_logging

if TYPE_CHECKING:  # annotations only: the driver imports this module and never loads a model
    from transformers import PreTrainedModel

logger = logging.getLogger(__name__)

# The one transformers logger that emits the per-load "LOAD REPORT" (a warning-level table).
_LOAD_REPORT_LOGGER = "transformers.modeling_utils"


class _HoldLoadReport(logging.Filter):
    """Holds back transformers' LOAD REPORT record instead of emitting it (see :func:`quiet_loading`)."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if "LOAD REPORT" in record.getMessage():
            self.held.append(record)
            return False
        return True


@contextmanager
def quiet_loading() -> Iterator[None]:
    """Hold back the per-load report table and hide the "Loading weights" bar; nothing else is touched.

    On success the held report is dropped (:func:`report_load` re-states what matters). If loading raises
    (transformers raises conversion errors *after* logging the report, and refers to it), the report is
    emitted before the exception propagates, so real errors keep their details.
    """

    def hook(factory: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if kwargs.get("desc") == "Loading weights":
            kwargs = {**kwargs, "disable": True}
        return previous(factory, args, kwargs) if previous is not None else factory(*args, **kwargs)

    report_filter = _HoldLoadReport()
    report_logger = logging.getLogger(_LOAD_REPORT_LOGGER)
    report_logger.addFilter(report_filter)
    previous = hf_logging.set_tqdm_hook(hook)
    try:
        yield
    except BaseException:
        report_logger.removeFilter(report_filter)
        for record in report_filter.held:
            report_logger.handle(record)
        raise
    finally:
        hf_logging.set_tqdm_hook(previous)
        report_logger.removeFilter(report_filter)


def report_load(model: PreTrainedModel, name: str, loading_info: Mapping[str, Any]) -> None:
    """Re-state the held-back load report, minus what is expected when fitting a new task head.

    Keys outside ``base_model_prefix`` belong to the task head: an encoder checkpoint lacks it by design, and
    a checkpoint fine-tuned on another task (the paper starts RTE/MRPC/STS-B from MNLI) has one of another
    size; both are re-initialised (debug/info). A missing encoder key means random weights where pre-trained
    ones were expected (warning); an encoder key of the wrong shape means the checkpoint does not fit its own
    config (``ValueError``).
    """
    prefix = f"{model.base_model_prefix}."
    missing = sorted(loading_info.get("missing_keys", ()))
    mismatched = sorted(loading_info.get("mismatched_keys", ()))  # (key, checkpoint shape, model shape)
    unexpected = sorted(loading_info.get("unexpected_keys", ()))
    encoder_mismatched = [m for m in mismatched if m[0].startswith(prefix)]
    if encoder_mismatched:
        details = ", ".join(
            f"{k}: checkpoint {tuple(a)} vs model {tuple(b)}" for k, a, b in encoder_mismatched
        )
        raise ValueError(f"model {name!r}: encoder weights of the wrong shape: {details}")
    head_missing = [k for k in missing if not k.startswith(prefix)]
    encoder_missing = [k for k in missing if k.startswith(prefix)]
    if head_missing:
        logger.debug("model %s: newly initialised head weights (expected): %s", name, head_missing)
    if mismatched:
        logger.info(
            "model %s: head re-initialised for the new label count: %s", name, [m[0] for m in mismatched]
        )
    if encoder_missing:
        logger.warning(
            "model %s: %d encoder weights missing from the checkpoint were randomly initialised: %s",
            name,
            len(encoder_missing),
            encoder_missing,
        )
    if unexpected:  # usually pre-training heads (MLM, NSP): harmless, but worth a trace
        logger.info("model %s: %d checkpoint weights unused: %s", name, len(unexpected), unexpected)
