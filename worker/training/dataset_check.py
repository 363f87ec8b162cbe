"""`python -m worker.training.dataset_check --task TASK FOLDER`: read an uploaded dataset the way training will.

The control plane validates an upload with this program (service.datasets.validate): it runs the trial's
own loader (`worker.training.data.load_examples`, column mapping none) on every split the task trains and
evaluates on, in the folder layout a trial fetches it into (`worker.training.datasets.folder_name`), so a
bad row is named at upload, not at trial time. The service runs it as a program, not an import: the control
plane imports nothing of the worker but its contract (docs/architecture.md §1), and a hostile file costs a
child process with a time limit, not the API's.

Its one line of stdout is JSON: `{"rows": {split: examples}}`, or (exit 1) `{"error": {"message", "file",
"row", "column"}}`, where `file` is the file's name inside FOLDER (None when no one file is at fault).
Standard library and the loader only: no torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from worker.contract.tasks import get_task
from worker.training.data import load_examples
from worker.training.files import DataError


def check(task_name: str, folder: Path) -> dict[str, int]:
    """Examples per split (train and each eval split) as training reads them; DataError on the first bad row."""
    task = get_task(task_name)
    return {split: len(load_examples(task, folder, split)) for split in (task.train_split, *task.eval_splits)}


def _describe(err: DataError, folder: Path) -> dict[str, Any]:
    """The error without the folder's path (a server-side temporary folder): the file's name, row, column."""
    file = Path(err.file) if isinstance(err.file, Path | str) and err.file is not None else None
    name = file.name if file is not None and file.parent == folder else None
    message = str(err)
    prefix = ", ".join(
        [str(err.file)]
        + ([f"row {err.row}"] if err.row else [])
        + ([f"column {err.column}"] if err.column else [])
    )
    message = message.removeprefix(f"{prefix}: ") if err.file is not None else message
    return {
        "message": message.replace(str(folder), "<upload>"),
        "file": name,
        "row": err.row,
        "column": err.column,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.training.dataset_check")
    parser.add_argument("--task", required=True)
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    try:
        rows = check(args.task, args.folder)
    except DataError as err:
        sys.stdout.write(json.dumps({"error": _describe(err, args.folder)}) + "\n")
        return 1
    except ValueError as err:  # an unknown task
        sys.stdout.write(
            json.dumps({"error": {"message": str(err), "file": None, "row": None, "column": None}}) + "\n"
        )
        return 1
    sys.stdout.write(json.dumps({"rows": rows}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
