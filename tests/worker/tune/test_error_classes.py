"""Error classes and one-line reasons (worker.contract.errors), on real errors where the OS can give them:
a write to a file past RLIMIT_FSIZE, an allocation past RLIMIT_AS, each in a child process."""

from __future__ import annotations

import errno
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from worker.contract.errors import (
    ERROR_CLASSES,
    NON_RETRYABLE,
    StorageError,
    classify,
    error_code,
    reason,
    storage_error,
)
from worker.training.data import DataError
from worker.tune.checkpoints import writing


@pytest.mark.parametrize(
    ("code", "name"),
    [(errno.ENOSPC, "ENOSPC"), (errno.EDQUOT, "EDQUOT"), (errno.EFBIG, "EFBIG"), (errno.EROFS, "EROFS"),
     (errno.EACCES, "EACCES"), (errno.EPERM, "EPERM"), (errno.ENOTDIR, "ENOTDIR"), (errno.EISDIR, "EISDIR")],
)  # fmt: skip
def test_a_refused_checkpoint_write_is_a_storage_error_with_a_one_line_reason(code: int, name: str) -> None:
    with pytest.raises(StorageError) as info, writing("the epoch 2 checkpoint to the sweep's storage"):
        raise OSError(code, "the OS's own words")
    error = info.value
    assert classify(error) == "storage" and error.code == code
    assert str(error).startswith("could not write the epoch 2 checkpoint to the sweep's storage: ")
    assert str(error).endswith(f"({name})") and "\n" not in reason(error)
    again = pickle.loads(pickle.dumps(error))  # crosses Ray processes
    assert type(again) is StorageError and str(again) == str(error) and again.code == code


def test_what_is_not_a_storage_failure_passes_unchanged() -> None:
    with pytest.raises(ConnectionResetError), writing("x"):
        raise ConnectionResetError(errno.ECONNRESET, "reset")
    with pytest.raises(FileNotFoundError), writing("x"):
        raise FileNotFoundError(errno.ENOENT, "gone")
    assert storage_error(OSError("no errno at all"), "x") is None
    # pyarrow's OSErrors carry the errno in their text only
    arrow = OSError(
        "Failed to open local file '/s/t/checkpoint_000000/trial_state.pt'. Detail: [errno 30] Read-only file system"
    )
    assert error_code(arrow) == errno.EROFS and classify(arrow) == "storage"
    # a permission error reading data is not storage: only a write turns EACCES/EPERM into it
    assert classify(PermissionError(errno.EACCES, "Permission denied")) == "other"


def test_storage_is_a_retryable_class_of_its_own() -> None:
    assert "storage" in ERROR_CLASSES and "storage" not in NON_RETRYABLE
    assert classify(None, "OSError: [Errno 28] No space left on device") == "storage"
    assert classify(RuntimeError("(sqlite3.OperationalError) database or disk is full")) == "storage"
    wrapped = RuntimeError("trial failed")
    wrapped.__cause__ = OSError(errno.EFBIG, "File too large")
    assert classify(wrapped) == "storage"


def _child(code: str) -> str:
    """Runs `code` in a fresh interpreter (its limits die with it); returns what it printed."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=120, check=True)  # fmt: skip
    return result.stdout.strip()


@pytest.mark.usefixtures("starts_processes")  # _child: a fresh interpreter
def test_a_real_efbig_from_rlimit_fsize_is_storage(tmp_path: Path) -> None:
    out = _child(f"""
        import resource, torch
        from worker.contract.errors import classify, reason
        from worker.tune.checkpoints import write_state, writing
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        try:
            with writing("the epoch 1 checkpoint"):
                write_state(__import__("pathlib").Path({str(tmp_path)!r}), {{"session": {{"w": torch.zeros(1 << 20)}}, "history": []}})
        except Exception as err:
            print(classify(err), "|", reason(err))
    """)  # fmt: skip
    assert out == "storage | StorageError: could not write the epoch 1 checkpoint: file too large (EFBIG)"


@pytest.mark.usefixtures("starts_processes")
def test_a_real_allocation_failure_under_rlimit_as_is_oom() -> None:
    out = _child("""
        import resource, torch
        from worker.contract.errors import classify, reason
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (used + (256 << 20), hard))
        for make in (lambda: torch.empty(1 << 30), lambda: bytearray(1 << 30)):
            try:
                make()
            except Exception as err:
                print(classify(err), "|", reason(err))
    """)
    torch_line, python_line = out.splitlines()
    assert torch_line.startswith("oom | RuntimeError: ") and "can't allocate memory" in torch_line
    assert python_line == "oom | MemoryError: out of memory (an allocation failed)"


@pytest.mark.usefixtures("starts_processes")
def test_a_real_efbig_from_safetensors_under_rlimit_fsize_is_storage(tmp_path: Path) -> None:
    # safetensors' writer (Rust) raises SafetensorError, not an OSError: "... (os error 27)".
    out = _child(f"""
        import resource, torch
        from safetensors.torch import save_file
        from worker.contract.errors import classify, reason
        from worker.tune.checkpoints import writing
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        try:
            with writing("the best model"):
                save_file({{"w": torch.zeros(1 << 20)}}, {str(tmp_path / "model.safetensors")!r})
        except Exception as err:
            print(classify(err), "|", reason(err))
    """)  # fmt: skip
    assert out == "storage | StorageError: could not write the best model: file too large (EFBIG)"


@pytest.mark.usefixtures("starts_processes")
def test_an_unexplained_error_at_the_address_space_limit_is_oom() -> None:
    # oneDNN reports an allocation refused under RLIMIT_AS as "could not create a primitive".
    out = _child("""
        import resource
        from worker.contract.errors import diagnose
        print(diagnose(RuntimeError("could not create a primitive")))
        used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (used + (64 << 20), resource.RLIM_INFINITY))
        print(diagnose(RuntimeError("could not create a primitive")))
        print(diagnose(ValueError("a bug")) [0], diagnose(FileNotFoundError(2, "gone"))[0])
        resource.setrlimit(resource.RLIMIT_AS, (used + (1 << 30), resource.RLIM_INFINITY))
        print(diagnose(RuntimeError("could not create a primitive"))[0])  # room left: not memory
    """)
    unlimited, limited, others, roomy = out.splitlines()
    assert unlimited == "('other', 'RuntimeError: could not create a primitive')"
    assert limited.startswith(
        "('oom', \"RuntimeError: could not create a primitive (out of memory: the process's "
    )
    assert "address space is at its limit (" in limited and "RLIMIT_AS))" in limited
    assert others == "other other" and roomy == "other"  # only a native error is suspect


def test_reasons_are_one_line() -> None:
    assert reason(DataError("unknown label", file="/d/train.tsv", row=3)) == (
        "DataError: /d/train.tsv, row 3: unknown label"
    )
    assert reason(torch.OutOfMemoryError("CUDA out of memory.\nTried to allocate 2 GiB")) == (
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"
    )
    assert reason(
        None, "Traceback (most recent call last):\n  File x\nDataError: /d/x.tsv: no data rows\n"
    ) == ("DataError: /d/x.tsv: no data rows")
    assert reason(None) == "no error message was recorded"
    from ray.exceptions import RayTaskError

    remote = RayTaskError(
        "train", "Traceback ...\n  File y\nDataError: bad", DataError("bad", file="/d/t.tsv")
    )
    assert reason(remote) == "DataError: /d/t.tsv: bad"  # the error it wraps, not the remote traceback
