"""Why a trial failed, as one of five classes: `numerics`, `oom`, `data`, `infra`, `other`.

`numerics`: the training diverged (too many steps in a row with a non-finite loss or gradient; each of
them was skipped, so no NaN reached the weights). The class goes on the trial's MLflow run
(`smartune.error_class`) and decides retries: `numerics` and `data` failures repeat deterministically, so a retry inside the same job attempt fails at once instead of
training again (a later job attempt tries for real: the data may have been fixed). Matching is by
exception type names along the cause chain, so this module imports neither torch nor ray.
"""

from __future__ import annotations

from typing import Literal

ErrorClass = Literal["numerics", "oom", "data", "infra", "other"]
ERROR_CLASSES: tuple[ErrorClass, ...] = ("numerics", "oom", "data", "infra", "other")
NON_RETRYABLE: frozenset[str] = frozenset({"numerics", "data"})

_NUMERICS_TYPES = {"NumericsError", "FloatingPointError"}
_OOM_TYPES = {"OutOfMemoryError", "MemoryError"}  # torch.OutOfMemoryError, ray.exceptions.OutOfMemoryError
_DATA_TYPES = {"DataError", "UnicodeDecodeError"}
_INFRA_TYPES = {
    "RayActorError",
    "ActorDiedError",
    "ActorUnavailableError",
    "WorkerCrashedError",
    "NodeDiedError",
    "OwnerDiedError",
    "ObjectLostError",
    "ObjectFetchTimedOutError",
    "RaySystemError",
    "LocalRayletDiedError",
    "GetTimeoutError",
    "ConnectionError",
}
_OOM_TEXT = ("out of memory", "outofmemoryerror")


class RepeatedFailure(RuntimeError):
    """A retry refused because the previous try in this job attempt failed with a non-retryable class."""

    def __init__(self, error_class: ErrorClass, message: str) -> None:
        super().__init__(f"not retried: the previous try failed with class {error_class!r}: {message}")
        self.error_class: ErrorClass = error_class
        self.previous = message

    def __reduce__(self) -> tuple[type[RepeatedFailure], tuple[ErrorClass, str]]:
        return RepeatedFailure, (self.error_class, self.previous)  # picklable across Ray processes


def _chain(error: BaseException) -> list[BaseException]:
    """The error, its Ray `cause` (a RayTaskError wraps the trainable's exception) and its causes."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [error]
    while todo:
        item = todo.pop()
        if item is None or any(item is s for s in seen):
            continue
        seen.append(item)
        todo += [getattr(item, "cause", None), item.__cause__, item.__context__]
    return seen


def _type_names(error: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(error).__mro__}


def classify(error: BaseException | None, text: str = "") -> ErrorClass:
    """The class of `error` (its chain included), falling back to the traceback `text` Tune recorded."""
    names: set[str] = set()
    messages = [text.lower()]
    for item in _chain(error) if error is not None else []:
        if isinstance(item, RepeatedFailure):
            return item.error_class
        names |= _type_names(item)
        messages.append(str(item).lower())
    joined = " ".join(messages)
    if names & _NUMERICS_TYPES or "numericserror" in joined:
        return "numerics"
    if names & _OOM_TYPES or any(t in joined for t in _OOM_TEXT):
        return "oom"
    if names & _DATA_TYPES or "dataerror" in joined:
        return "data"
    if names & _INFRA_TYPES or any(n.lower() in joined for n in ("actordiederror", "workercrashederror")):
        return "infra"
    return "other"
