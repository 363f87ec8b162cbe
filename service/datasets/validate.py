"""An upload checked before it is stored: its fields, its file names, and every row, by training's own loader.

The rows are read by `python -m worker.training.dataset_check` (the trial's loader, in the layout a trial
fetches the dataset into) in a child process with a time limit, confined to the upload's folder
(SMARTUNE_DATA_ROOTS). A bad row is a 422 naming the file, the line and the column, never the cell.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from service.datasets.upload import Form
from service.errors import ApiError
from worker.contract.names import check_display_name
from worker.contract.sources import DATASET_NAME, TABLE_SUFFIXES
from worker.contract.tasks import TaskSpec, get_task

logger = logging.getLogger(__name__)

CHECK_MODULE = "worker.training.dataset_check"
MAX_DESCRIPTION = 2000  # characters


def folder_name(task: TaskSpec) -> str:
    """The folder the files are laid out in: worker.training.datasets.folder_name's rule (a test checks
    that both agree): the GLUE folder name, so GLUE TSVs are read the GLUE way, else the task's name."""
    return task.glue_dir or task.name


def fields(form: Form) -> tuple[str, TaskSpec, str | None]:
    """The upload's name, task and description, each checked; 422 naming the field."""
    unknown = sorted(set(form.fields) - {"name", "task", "description"})
    if unknown:
        raise ApiError(422, f"{unknown[0]}: unknown field; an upload has name, task, description, files",
                       field=unknown[0])  # fmt: skip
    name = form.fields.get("name", "").strip()
    if not name:
        raise ApiError(422, "name: missing", field="name")
    try:  # the one rule for names people read (worker.contract.names), before the pattern: it says why
        check_display_name(name)
    except ValueError as err:
        raise ApiError(422, f"name: {err}", field="name") from None
    if not DATASET_NAME.fullmatch(name) or name == "sha256":
        raise ApiError(422, "name: 1-100 letters, digits, '.', '_' or '-', starting with a letter or digit "
                            "(and not 'sha256')", field="name")  # fmt: skip
    try:
        task = get_task(form.fields.get("task", "").strip() or "?")
    except ValueError as err:
        raise ApiError(422, f"task: {err}", field="task") from None
    try:  # as given: a trailing newline is refused too, as the document's pattern says
        check_display_name(form.fields.get("description", ""), "description")
    except ValueError as err:
        raise ApiError(422, f"description: {err}", field="description") from None
    description = form.fields.get("description", "").strip() or None
    if description is not None and len(description) > MAX_DESCRIPTION:
        raise ApiError(422, f"description: longer than {MAX_DESCRIPTION} characters", field="description")
    return name, task, description


def file_names(form: Form, task: TaskSpec) -> None:
    """Each file is one split the task trains or evaluates on (`<split>.<tsv|csv|jsonl|json>`, `dev` also
    as `validation`), each such split once; 422 naming `files` otherwise."""
    if not form.files:
        raise ApiError(422, "files: no file uploaded (send one or more parts named `files`)", field="files")
    splits = {alias: split for split in task.splits for alias in (split, task.hub_split(split))}
    seen: dict[str, str] = {}
    for staged in form.files:
        stem, dot, suffix = staged.name.rpartition(".")
        split = splits.get(stem)
        if not dot or f".{suffix.lower()}" not in TABLE_SUFFIXES or split is None:
            wanted = ", ".join(f"{s}.tsv" for s in task.splits)
            raise ApiError(422, f"files: {staged.name!r} is no split of task {task.name!r}; name the files "
                                f"{wanted} (or .csv, .jsonl)", field="files")  # fmt: skip
        if split in seen:
            raise ApiError(422, f"files: {seen[split]!r} and {staged.name!r} are both split {split!r}",
                           field="files")  # fmt: skip
        seen[split] = staged.name


def rows(task: TaskSpec, folder: Path, timeout_s: float) -> dict[str, int]:
    """Examples per split as training reads them; 422 naming the file, line and column of a bad row."""
    environment = {**os.environ, "SMARTUNE_DATA_ROOTS": str(folder.parent)}
    command = [sys.executable, "-m", CHECK_MODULE, "--task", task.name, str(folder)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=environment)
    except subprocess.TimeoutExpired:
        raise ApiError(422, f"files: reading the upload took longer than {timeout_s:g} s "
                            "(SMARTUNE_DATASET_CHECK_TIMEOUT_S)", field="files") from None  # fmt: skip
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        logger.error("%s failed (exit %s): %s", CHECK_MODULE, done.returncode, done.stderr[-2000:])
        raise RuntimeError(f"{CHECK_MODULE} gave no answer (exit {done.returncode})") from None
    if "rows" in answer:
        return {str(split): int(n) for split, n in answer["rows"].items()}
    error = answer["error"]
    where = [f"line {error['row']}"] if error.get("row") else []
    where += [f"column {error['column']}"] if error.get("column") else []
    prefix = f"files: {error['file']}" if error.get("file") else "files"
    detail = f"{prefix}{' ' + ', '.join(where) if where else ''}: {error['message']}"
    extra = {"file": error.get("file"), "line": error.get("row"), "column": error.get("column")}
    raise ApiError(422, detail, field="files", extra=extra)
