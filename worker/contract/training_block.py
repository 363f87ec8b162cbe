"""The job spec's `training` block: the trial fields marked `spec` in worker.contract.trial, derived from
them so the block's defaults, bounds and help cannot drift from the trial's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, create_model

from worker.contract.search import StrictModel
from worker.contract.trial import KNOBS, TYPES, TrainConfig


def _training_model() -> type[BaseModel]:
    """A pydantic model of the `spec` knobs, with the same defaults, bounds and help."""
    defaults = TrainConfig()
    declared: dict[str, Any] = {}
    for name, knob in KNOBS.items():
        if knob.spec:
            bounds = {k: getattr(knob, k) for k in ("ge", "gt", "le", "lt") if getattr(knob, k) is not None}
            default = getattr(defaults, name)
            if knob.omit_default:
                bounds["exclude_if"] = lambda value, default=default: value == default
            declared[name] = (TYPES[name], Field(default, description=knob.help, **bounds))
    model: type[BaseModel] = create_model("Training", __base__=StrictModel, **declared)
    return model


if TYPE_CHECKING:

    class Training(StrictModel):
        """The fields are derived from worker.contract.trial at run time (see _training_model)."""

else:
    Training = _training_model()
