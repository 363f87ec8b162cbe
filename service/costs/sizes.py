"""How many examples a trial trains on per epoch, and evaluates, before anything is read by the worker.

`max_train_samples` rows (a seeded stratified sample, or the first ones with `sampling: head`: the count is
the same), then the seeded `train_fraction` of them, less the `validation_fraction` held out to choose the
best epoch (worker/training/prepared.py; those rows are evaluated after every epoch, which the eval count
leaves out: a forward pass over at most a fraction of the training rows).
The split's size comes from the GLUE folder the service can read (lines of `<TASK>/<split>.tsv`, header
excluded), else from GLUE's published sizes when the data is GLUE (`data` unset: SMARTUNE_GLUE_DIR or the
hub's `glue`, which has the same splits); an uploaded dataset (`dataset:sha256:...`) from the row counts its
upload recorded (the caller looks them up: `Uploaded`); else it is unknown and the answer says why. Counts are
cached by file, size and modification time.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from worker.contract.sources import SourceError, classify
from worker.contract.tasks import TASKS, TaskSpec

# Rows per split of GLUE as distributed (Wang et al., 2019; the hub's `glue` dataset has the same counts).
GLUE_SIZES: dict[str, dict[str, int]] = {
    "cola": {"train": 8551, "dev": 1043},
    "sst2": {"train": 67349, "dev": 872},
    "mrpc": {"train": 3668, "dev": 408},
    "stsb": {"train": 5749, "dev": 1500},
    "qqp": {"train": 363846, "dev": 40430},
    "mnli": {"train": 392702, "dev_matched": 9815, "dev_mismatched": 9832},
    "qnli": {"train": 104743, "dev": 5463},
    "rte": {"train": 2490, "dev": 277},
    "wnli": {"train": 635, "dev": 71},
}
MAX_COUNTED_BYTES = 512 * 2**20  # a larger file is not counted on a request thread


@dataclass(frozen=True)
class Size:
    rows: int | None
    basis: str  # where the number comes from, or why there is none


@dataclass(frozen=True)
class Uploaded:
    """An uploaded dataset's recorded rows (service.datasets: split -> examples, as training reads them)."""

    label: str  # NAME@VERSION, for the basis
    rows: Mapping[str, int]


@lru_cache(maxsize=256)
def _count_lines(path: str, size: int, mtime_ns: int) -> int:  # noqa: ARG001 (the cache key)
    with open(path, "rb") as file:
        return sum(block.count(b"\n") for block in iter(lambda: file.read(1 << 20), b""))


def _counted(path: Path, header: bool) -> Size | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    if not path.is_file() or stat.st_size > MAX_COUNTED_BYTES or not os.access(path, os.R_OK):
        return None
    lines = _count_lines(str(path), stat.st_size, stat.st_mtime_ns)
    return Size(max(0, lines - int(header)), f"rows of {path.name} in the {path.parent.name} folder")


def _local(folder: Path, task: TaskSpec, split: str) -> Size | None:
    if task.glue_dir is None:
        return None
    for candidate in (folder / task.glue_dir / f"{split}.tsv", folder / f"{split}.tsv"):
        found = _counted(candidate, task.tsv_header)
        if found is not None:
            return found
    return None


def split_size(
    task_name: str, split: str, data: str | None, glue_dir: Path | None, uploaded: Uploaded | None = None
) -> Size:
    """Rows of one split of the task in `data` (None: the GLUE folder, else the hub's GLUE; an uploaded
    dataset: `uploaded`'s counts)."""
    task = TASKS[task_name]
    if data is None:
        if glue_dir is not None and (found := _local(glue_dir, task, split)) is not None:
            return found
        if split in GLUE_SIZES.get(task_name, {}):
            return Size(GLUE_SIZES[task_name][split], "GLUE's published size")
        return Size(None, f"{task_name} is not a GLUE task and no data folder is named")
    try:
        source = classify(data, "data")
    except SourceError as err:
        return Size(None, str(err))
    if source.kind == "dataset":
        if uploaded is None:
            return Size(None, f"no row counts recorded for the uploaded dataset {data}")
        if split not in uploaded.rows:
            return Size(None, f"the uploaded dataset {uploaded.label} has no {split} split")
        return Size(uploaded.rows[split], f"rows of {split} in the uploaded dataset {uploaded.label}")
    if source.kind != "local":
        return Size(None, "a hub dataset: its size is not known before the worker downloads it")
    if source.path.is_dir() and (found := _local(source.path, task, split)) is not None:
        return found
    if source.path.suffix in (".tsv", ".csv", ".jsonl") and split == task.train_split:
        found = _counted(source.path, header=source.path.suffix != ".jsonl")
        if found is not None:
            return Size(found.rows, f"lines of {source.path.name}")
    return Size(None, f"no GLUE-layout {split}.tsv or table file the service can count in {data}")


def held_out(rows: int, validation_fraction: float) -> int:
    """Rows of `rows` held out for validation: worker.training.sampling.split_validation's count."""
    if validation_fraction <= 0 or rows < 2:
        return 0
    return min(rows - 1, max(1, round(validation_fraction * rows)))


def train_examples(
    task_name: str,
    data: str | None,
    glue_dir: Path | None,
    max_samples: int | None,
    fraction: float,
    validation_fraction: float = 0.0,
    uploaded: Uploaded | None = None,
) -> Size:
    """Training examples per epoch: `max_samples` rows, then `fraction` of them, less those held out."""
    size = split_size(task_name, TASKS[task_name].train_split, data, glue_dir, uploaded)
    rows, basis = size.rows, size.basis
    if rows is None:
        if max_samples is None:
            return size
        rows, basis = max_samples, f"max_train_samples (an upper bound: {size.basis})"
    elif max_samples is not None and max_samples < rows:
        rows, basis = max_samples, f"max_train_samples of {basis}"
    if fraction < 1:
        rows, basis = max(1, round(fraction * rows)), f"train_fraction {fraction:g} of {basis}"
    if held_out(rows, validation_fraction):
        rows, basis = (
            rows - held_out(rows, validation_fraction),
            f"{basis}, less validation_fraction {validation_fraction:g}",
        )
    return Size(rows, basis)


def eval_examples(
    task_name: str,
    data: str | None,
    glue_dir: Path | None,
    max_samples: int | None,
    uploaded: Uploaded | None = None,
) -> Size:
    """Examples evaluated after every epoch, over the task's eval splits."""
    total, bases = 0, []
    for split in TASKS[task_name].eval_splits:
        size = split_size(task_name, split, data, glue_dir, uploaded)
        rows = size.rows if size.rows is not None else max_samples
        if rows is None:
            return size
        total += min(rows, max_samples) if max_samples is not None else rows
        bases.append(size.basis if size.rows is not None else "max_eval_samples")
    return Size(total, "; ".join(dict.fromkeys(bases)))
