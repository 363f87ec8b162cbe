"""Which local files a trial reads, for the data digest in its provenance (docs/architecture.md §6).

Mirrors worker.training.data's lookup order without reading any rows: a file is itself; a GLUE-layout folder
gives `<TASK>/<split>.tsv`; another folder gives `<split>.<ext>` (`dev` also matches `validation`).
A hub dataset has no local files (empty list); an uploaded dataset's are those of its verified local copy.
"""

from __future__ import annotations

from pathlib import Path

from worker.contract.sources import DATASET_PREFIX
from worker.contract.tasks import TaskSpec
from worker.contract.trial import TrainConfig
from worker.training.data import TABLE_SUFFIXES
from worker.training.datasets import dataset_folder


def _split_file(folder: Path, task: TaskSpec, split: str) -> Path | None:
    stems = dict.fromkeys((split, task.hub_split(split)))
    for stem in stems:
        for suffix in (".tsv", *TABLE_SUFFIXES):
            candidate = folder / f"{stem}{suffix}"
            if candidate.is_file():
                return candidate
    return None


def data_files(config: TrainConfig, task: TaskSpec) -> list[Path]:
    if config.data is None:
        return []
    if config.data.startswith(DATASET_PREFIX):  # an uploaded dataset: its verified local copy
        path = dataset_folder(config.data, task)
    else:
        path = Path(config.data).expanduser()
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    folder = path
    if config.columns is None and task.glue_dir is not None and (path / task.glue_dir).is_dir():
        folder = path / task.glue_dir
    splits = (task.train_split, *task.eval_splits)
    found = [_split_file(folder, task, split) for split in splits]
    return [p for p in found if p is not None]
