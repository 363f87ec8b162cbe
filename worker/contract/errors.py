"""Why a trial failed, as one of eight classes: `numerics`, `oom`, `data`, `storage`, `infra`, `stalled`,
`user`, `other`.

- `numerics`: the training diverged (too many steps in a row with a non-finite loss or gradient; each of
  them was skipped, so no NaN reached the weights).
- `oom`: memory ran out: a GPU's (`torch.OutOfMemoryError`), Ray's memory monitor killing the worker
  (`ray.exceptions.OutOfMemoryError`), or the host's address space (a process limit, `MemoryError`,
  torch's "can't allocate memory", ENOMEM).
  An allocation refused under RLIMIT_AS does not always say so: oneDNN reports it as "could not create a
  primitive". So a trial whose RuntimeError is otherwise unexplained, raised while its address space is
  at its limit (`diagnose`, in the trial's process), is `oom` too, and its reason says so.
- `data`: a data file (or a local model folder) cannot be used: missing, malformed, not UTF-8, a label
  outside the task's labels, or outside the deployment's data roots (`DataError`).
- `storage`: a write to the trial's storage failed: its checkpoint folder is read-only or refuses us, the
  disk or a quota is full, a file grew past a size limit, a file stands where a folder should
  (`StorageError`, raised by the trial around its checkpoint and artifact writes, from an OSError or a
  native writer's "(os error N)"; else an OSError with ENOSPC, EDQUOT, EFBIG or EROFS anywhere).
- `infra`: the trial's process, actor or node died (a SIGKILL, a lost node).
- `stalled`: the trial's process reported nothing for its stall limit and the driver killed it
  (worker.tune.stall_guard sets the class on the run before the kill; nothing here infers it).
- `user`: a custom function (worker.contract.function) raised, or could not be imported: the trial's
  `UserFunctionError` wraps what it raised (`UserFunctionError: <type>: <message>`), unless that was the
  memory running out (`oom`: the trial is retried alone, as any other).
- `other`: anything else; the message says what.

The class goes on the trial's MLflow run (`smartune.error_class`) and decides retries: `numerics` and
`data` failures repeat deterministically, so a retry inside the same job attempt fails at once instead of
training again (a later job attempt tries for real: the data may have been fixed). `storage` is retried:
the condition lies outside the trial's inputs and often clears (Tune drops superseded checkpoints, other
jobs finish and free the disk, an operator remounts a folder), and a retry resumes from the last
checkpoint that was written, so a persistent fault costs at most one epoch per retry; calling a passing
fault permanent would lose the trial for the whole job attempt. Matching is by exception type names along
the cause chain, errno values and message text, so this module imports neither torch nor ray.
"""

from __future__ import annotations

import errno
import os
import re
import resource
from pathlib import Path
from typing import Literal

ErrorClass = Literal["numerics", "oom", "data", "storage", "infra", "stalled", "user", "other"]
ERROR_CLASSES: tuple[ErrorClass, ...] = (
    "numerics", "oom", "data", "storage", "infra", "stalled", "user", "other"
)  # fmt: skip
# A user function's failure repeats like the data's: the same config and code fail again.
NON_RETRYABLE: frozenset[str] = frozenset({"numerics", "data", "user"})

_NUMERICS_TYPES = {"NumericsError", "FloatingPointError"}
_OOM_TYPES = {"OutOfMemoryError", "MemoryError"}  # torch.OutOfMemoryError, ray.exceptions.OutOfMemoryError
_DATA_TYPES = {"DataError", "UnicodeDecodeError"}
_STORAGE_TYPES = {"StorageError"}
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
# torch's CPU allocator says "can't allocate memory"; ENOMEM's own text is "Cannot allocate memory".
_OOM_TEXT = ("out of memory", "outofmemoryerror", "can't allocate memory", "cannot allocate memory")
# Errnos that only a write to a full, limited or read-only file system gives: storage wherever they occur.
_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})
# ... and those that are storage failures when a checkpoint or artifact write meets them (reading a data
# file can be refused too, and that is `data`): refused, an I/O error, or a file where a folder should be
# (or the reverse) on the way to the storage.
_WRITE_ERRNOS = _STORAGE_ERRNOS | {errno.EACCES, errno.EPERM, errno.EIO, errno.ENOTDIR, errno.EISDIR}
_STORAGE_TEXT = tuple(os.strerror(code).lower() for code in sorted(_STORAGE_ERRNOS)) + (
    "storageerror",
    "database or disk is full",  # SQLite's SQLITE_FULL (an MLflow store on a full disk)
)
_ERRNO_IN_TEXT = re.compile(r"\[errno (\d+)\]", re.IGNORECASE)  # pyarrow's OSErrors carry it in text only
# Rust's io::Error says "File too large (os error 27)": safetensors' SafetensorError (not an OSError) does.
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)", re.IGNORECASE)


class RepeatedFailure(RuntimeError):
    """A retry refused because the previous try in this job attempt failed with a non-retryable class."""

    def __init__(self, error_class: ErrorClass, message: str) -> None:
        super().__init__(f"not retried: the previous try failed with class {error_class!r}: {message}")
        self.error_class: ErrorClass = error_class
        self.previous = message

    def __reduce__(self) -> tuple[type[RepeatedFailure], tuple[ErrorClass, str]]:
        return RepeatedFailure, (self.error_class, self.previous)  # picklable across Ray processes


class UserFunctionError(RuntimeError):
    """A custom function raised (or could not be imported); the message names what it raised."""

    def __reduce__(self) -> tuple[type[UserFunctionError], tuple[str]]:
        return UserFunctionError, (str(self),)  # picklable across Ray processes, without the user's cause


class StorageError(OSError):
    """A write of the trial's checkpoint or artifacts failed; the message says what, where and why."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code  # the errno, when known (OSError's own `errno` stays None: one-argument form)

    def __reduce__(self) -> tuple[type[StorageError], tuple[str, int | None]]:
        return StorageError, (str(self), self.code)  # picklable across Ray processes


def error_code(error: BaseException) -> int | None:
    """The errno of an OSError: its attribute, else the `[errno N]` in its text (pyarrow's errors); of
    any other error, the `(os error N)` of a Rust I/O error in its text (safetensors' writer)."""
    if isinstance(error, OSError) and isinstance(error.errno, int):
        return error.errno
    pattern = _ERRNO_IN_TEXT if isinstance(error, OSError) else _RUST_OS_ERROR
    found = pattern.search(str(error))
    return int(found.group(1)) if found else None


def storage_error(error: BaseException, what: str) -> StorageError | None:
    """`error`, met while writing `what`, as a StorageError with a one-line reason; None when it is not
    a storage failure (a connection error, an OSError without a write errno)."""
    code = error_code(error)
    if isinstance(error, StorageError | ConnectionError) or code is None or code not in _WRITE_ERRNOS:
        return None
    name = errno.errorcode.get(code, str(code))
    return StorageError(f"could not write {what}: {os.strerror(code).lower()} ({name})", code)


# An address space this close to its RLIMIT_AS has run out: the allocation that failed did not fit.
_AS_HEADROOM = 256 << 20


def _gib(size: int) -> str:
    return f"{size / (1 << 30):.2f} GiB"


def address_space_note(status: Path = Path("/proc/self/status")) -> str | None:
    """When this process's address space is within 256 MiB of its RLIMIT_AS, a note saying so, for the
    reason of a failure that happened there (an allocation refused in native code that did not say
    why); None when there is no such limit or room is left."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        lines = status.read_text().splitlines()
        size = next(int(line.split()[1]) * 1024 for line in lines if line.startswith("VmSize:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    if soft - size >= _AS_HEADROOM:
        return None
    used = f"{_gib(size)} of {_gib(soft)}"
    return f"out of memory: the process's address space is at its limit ({used}, RLIMIT_AS)"


def diagnose(error: BaseException) -> tuple[ErrorClass, str]:
    """(class, one-line reason) of an error caught in the process where it happened: `classify` and
    `reason`, except that an otherwise unexplained RuntimeError (what torch makes of a native error)
    raised at the address-space limit is `oom`."""
    error_class, line = classify(error), reason(error)
    native = isinstance(error, RuntimeError) and not isinstance(error, RepeatedFailure)
    if error_class == "other" and native and (note := address_space_note()) is not None:
        return "oom", f"{line} ({note})"[:1000]
    return error_class, line


_NO_MESSAGE = {"MemoryError": "out of memory (an allocation failed)"}


def reason(error: BaseException | None, text: str = "") -> str:
    """The failure as one readable line (`smartune.error`): the innermost error's type and message with
    its whitespace folded, else the last line of the traceback `text` Tune recorded; at most 1000 chars.
    A Ray task error's own text is a remote traceback, so the error it wraps (`cause`) speaks instead."""
    while error is not None and isinstance(getattr(error, "cause", None), BaseException):
        error = error.cause  # type: ignore[attr-defined]
    if error is not None:
        name = type(error).__name__
        line = f"{name}: {' '.join(str(error).split()) or _NO_MESSAGE.get(name, 'no message')}"
    else:
        lines = [stripped for raw in text.splitlines() if (stripped := raw.strip())]
        line = lines[-1] if lines else "no error message was recorded"
    return line[:1000]


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
    codes: set[int | None] = set()
    messages = [text.lower()]
    for item in _chain(error) if error is not None else []:
        if isinstance(item, RepeatedFailure):
            return item.error_class
        names |= _type_names(item)
        codes.add(error_code(item))
        messages.append(str(item).lower())
    joined = " ".join(messages)
    user = "UserFunctionError" in names or "userfunctionerror" in joined
    if user and not (names & _OOM_TYPES or errno.ENOMEM in codes or any(t in joined for t in _OOM_TEXT)):
        return "user"
    if names & _NUMERICS_TYPES or "numericserror" in joined:
        return "numerics"
    if names & _OOM_TYPES or errno.ENOMEM in codes or any(t in joined for t in _OOM_TEXT):
        return "oom"
    if names & _DATA_TYPES or "dataerror" in joined:
        return "data"
    if names & _STORAGE_TYPES or codes & _STORAGE_ERRNOS or any(t in joined for t in _STORAGE_TEXT):
        return "storage"
    if names & _INFRA_TYPES or any(n.lower() in joined for n in ("actordiederror", "workercrashederror")):
        return "infra"
    return "other"
