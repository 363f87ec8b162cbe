"""Loading task data into :class:`Example` lists.

Sources (see :func:`load_examples`):

* the classic GLUE layout, ``<root>/<TASK>/<split>.tsv`` read the way GLUE and Hugging Face ``glue``
  read it: tab-separated, UTF-8 (a leading BOM is dropped), no quote processing (``csv.QUOTE_NONE``);
* custom CSV / TSV / JSON-lines files with a column mapping (canonical name -> file column);
* a Hugging Face dataset id (needs the optional ``datasets`` package and, unless cached, a network).

Classification labels become integer ids in the order of ``TaskSpec.labels``; regression scores
become floats (each field is read by :mod:`worker.training.field_values`). Every problem with a file
raises :class:`DataError` naming the file, the 1-based row (the file's line number, header included), the
column and what was expected, never the offending cell or header: a file may be a secret that a symlink
smuggled in, so no message quotes what a file holds. Every file is opened through
:mod:`worker.training.files`, which refuses one that leads outside the data roots.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from worker.contract.sources import SourceError, classify
from worker.contract.tasks import LABEL_COLUMN, TaskSpec
from worker.training.datasets import dataset_folder
from worker.training.field_values import parse_label, parse_text
from worker.training.files import DataError, Where, confine, open_data
from worker.training.json_rows import parse_row

__all__ = ["DataError", "Example", "Where", "load_examples", "load_glue_split", "load_hub", "load_table"]

TABLE_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv")  # looked for in this order inside a folder

_TSV: dict[str, Any] = {"delimiter": "\t", "quoting": csv.QUOTE_NONE}  # GLUE's way: no quote processing
_CSV: dict[str, Any] = {"delimiter": ",", "quoting": csv.QUOTE_MINIMAL}  # RFC 4180 quoting
Records = Iterable[tuple[int, Callable[[str], Any]]]  # (1-based row, canonical column -> raw value)


@dataclass(frozen=True, slots=True)
class Example:
    """One labelled example: 1 or 2 texts and a class id (int) or a regression target (float), and the
    source its file names for it (``TaskSpec.tsv_stratum``: STS-B's genre, CoLA's publication), else None."""

    texts: tuple[str, ...]
    label: int | float
    stratum: str | None = None


_STRATUM = "stratum"  # the key under which a getter reads a row's source (not a canonical column)


def _utf8_error(file: Where, error: UnicodeDecodeError) -> DataError:
    """A DataError for a file that is not UTF-8, naming the first line that fails to decode."""
    row = None
    if isinstance(file, Path):  # the decoder works in chunks: find the line again, line by line
        with open_data(file, "rb") as f:
            for row, line in enumerate(f, 1):  # noqa: B007 (row is the result)
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError:
                    break
            else:
                row = None
    return DataError(f"not UTF-8 text ({error.reason})", file=file, row=row)


def _collect(
    task: TaskSpec, records: Records, names: Mapping[str, str], file: Where, stratum: bool = False
) -> list[Example]:
    """Examples from ``(row, getter)`` pairs, where ``get(canonical)`` reads a raw field and
    ``names[canonical]`` is how errors name its column; with ``stratum``, ``get("stratum")`` reads the
    row's source. Rows without a gold label are dropped."""
    examples: list[Example] = []
    dropped = 0
    try:
        for row, get in records:
            texts = tuple(parse_text(get(c), file, row, names[c]) for c in task.text_columns)
            label = parse_label(task, get(LABEL_COLUMN), file, row, names[LABEL_COLUMN])
            if label is None:
                dropped += 1
            else:
                examples.append(Example(texts, label, str(get(_STRATUM)).strip() if stratum else None))
    except UnicodeDecodeError as e:  # `from None`: the decoder's own message quotes the bad bytes
        raise _utf8_error(file, e) from None
    if not examples:
        why = f" ({dropped} rows without a gold label were dropped)" if dropped else ""
        raise DataError(f"no data rows{why}", file=file)
    return examples


def _getter(values: Any, keys: Mapping[str, Any]) -> Callable[[str], Any]:
    """`column -> values[keys[column]]`, bound to this record (a lambda in the loop would see later ones)."""
    return lambda column: values[keys[column]]


def _delimited_records(
    reader: Any, index: Mapping[str, int], names: Mapping[str, str], path: Path
) -> Records:
    """(row, getter) per non-blank record; a row is the line the record starts on (CSV may span lines)."""
    width = max(index.values()) + 1  # a row needs at least this many fields
    line = reader.line_num
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise DataError(f"malformed line: {e}", file=path, row=reader.line_num) from e
        row, line = line + 1, reader.line_num
        if not fields:
            continue  # blank line
        if len(fields) < width:
            short = min((c for c in index if index[c] >= len(fields)), key=lambda c: index[c])
            raise DataError(f"too few fields: expected at least {width}, got {len(fields)}",
                            file=path, row=row, column=names[short])  # fmt: skip
        yield row, _getter(fields, index)


def _read_delimited(
    path: Path,
    task: TaskSpec,
    columns: Mapping[str, str | int],
    header: bool,
    stratum: str | int | None = None,
    **fmt: Any,
) -> list[Example]:
    """Read a CSV/TSV file (``fmt``: csv.reader options); ``columns`` maps canonical names to header
    names, or to 0-based indices when the file has no header; ``stratum`` names the column of each row's
    source, read when the file has it (a header without it: no stratum)."""
    try:
        # utf-8-sig drops the BOM that starts MRPC's header; newline="" lets csv handle line ends.
        with open_data(path, encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f, **fmt)
            if header:
                head = next(reader, None)
                if head is None:
                    raise DataError("empty file (no header line)", file=path)
                position = {name.strip(): i for i, name in enumerate(head)}
                for canonical, column in columns.items():
                    if column not in position:
                        raise DataError(f"missing column (for {canonical!r}); none of the header's {len(head)} "
                                        "columns has that name", file=path, row=1, column=repr(column))  # fmt: skip
                index = {c: position[str(k)] for c, k in columns.items()}
                names = {c: repr(k) for c, k in columns.items()}
                if stratum is not None and str(stratum) in position:
                    index[_STRATUM], names[_STRATUM] = position[str(stratum)], repr(stratum)
            else:  # errors name the 1-based field number
                index = {c: int(k) for c, k in columns.items()}
                names = {c: f"{int(k) + 1} ({c})" for c, k in columns.items()}
                if stratum is not None:
                    index[_STRATUM], names[_STRATUM] = int(stratum), f"{int(stratum) + 1} ({_STRATUM})"
            records = _delimited_records(reader, index, names, path)
            return _collect(task, records, names, path, stratum=_STRATUM in index)
    except UnicodeDecodeError as e:  # in the header line
        raise _utf8_error(path, e) from None


def _jsonl_records(f: IO[str], columns: Mapping[str, str], path: Path) -> Records:
    """(row, getter) per non-blank line of a JSON-lines file; every line must be an object."""
    for row, line in enumerate(f, start=1):
        if not line.strip():
            continue
        record = parse_row(line, path, row)  # bounded: length, nesting and digits before json.loads
        if not isinstance(record, dict):
            raise DataError("expected a JSON object", file=path, row=row)
        for canonical, key in columns.items():
            if key not in record:
                raise DataError(f"missing column (for {canonical!r})", file=path, row=row, column=repr(key))
        yield row, _getter(record, columns)


def _column_mapping(task: TaskSpec, columns: Mapping[str, str] | None, file: Where) -> dict[str, str]:
    """Complete a user mapping (canonical -> file column); unmapped columns keep their canonical name."""
    wanted = (*task.text_columns, LABEL_COLUMN)
    for key in columns or {}:
        if key not in wanted:
            raise DataError(f"unknown canonical column; task {task.name!r} has: {', '.join(wanted)}",
                            file=file, column=repr(key))  # fmt: skip
    return {c: (columns or {}).get(c, c) for c in wanted}


def load_glue_split(task: TaskSpec, glue_dir: Path, split: str) -> list[Example]:
    """Read ``<glue_dir>/<task.glue_dir>/<split>.tsv`` in GLUE's format (header per task, QUOTE_NONE)."""
    if task.glue_dir is None:
        raise DataError(f"task {task.name!r} has no GLUE TSV layout; give a file with a column mapping")
    path = confine(Path(glue_dir) / task.glue_dir / f"{split}.tsv")
    if not path.is_file():
        raise DataError(f"file not found (split {split!r} of task {task.name!r})", file=path)
    return _read_delimited(path, task, dict(task.tsv_columns), task.tsv_header, task.tsv_stratum, **_TSV)


def load_table(path: Path, task: TaskSpec, columns: Mapping[str, str] | None = None) -> list[Example]:
    """Read a custom ``.csv``, ``.tsv`` or ``.jsonl``/``.json`` (JSON lines) file with a header.

    ``columns`` maps canonical names (``task.text_columns`` and ``label``) to file columns; unmapped
    ones are looked up under their canonical name. CSV follows RFC 4180 quoting; TSV, as in GLUE, has
    no quoting.
    """
    path = confine(Path(path))  # before anything is learnt about it, even whether it exists
    if not path.is_file():
        raise DataError("file not found", file=path)
    mapping = _column_mapping(task, columns, path)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        with open_data(path, encoding="utf-8-sig") as f:
            return _collect(
                task, _jsonl_records(f, mapping, path), {c: repr(k) for c, k in mapping.items()}, path
            )
    if suffix in (".csv", ".tsv"):
        return _read_delimited(path, task, mapping, True, **(_CSV if suffix == ".csv" else _TSV))
    raise DataError(f"unsupported file type {suffix!r}; use one of {', '.join(TABLE_SUFFIXES)}", file=path)


def load_hub(
    task: TaskSpec,
    split: str,
    dataset_id: str | None = None,
    config: str | None = None,
    columns: Mapping[str, str] | None = None,
) -> list[Example]:
    """Load ``split`` from the Hugging Face hub (``datasets`` is optional and imported only here).

    Without ``dataset_id`` the task's own dataset is used; naming it (``glue``, ``nyu-mll/glue``,
    ``snli``, ...) also selects the task's config. Rows without a gold label (SNLI's -1) are dropped.
    """
    try:
        import datasets  # optional: pip install 'smartune[hub]'
    except ImportError as e:
        raise DataError(
            "hub datasets need the optional `datasets` package: pip install 'smartune[hub]'"
        ) from e
    hub_id = dataset_id or task.hub_id
    if hub_id is None:
        raise DataError(f"task {task.name!r} has no Hugging Face dataset; give a dataset id or local files")
    own = task.hub_id is not None and hub_id in (task.hub_id, task.hub_id.rsplit("/", 1)[-1])
    config = config if config is not None else (task.hub_config if own else None)
    hub_split = task.hub_split(split)
    source = f"hub:{hub_id}" + (f"/{config}" if config else "") + f"[{hub_split}]"
    try:
        dataset = datasets.load_dataset(hub_id, config, split=hub_split)
    except Exception as e:  # network, cache, unknown id/config/split: all reported the same way
        raise DataError(f"cannot load (offline, or unknown id/config/split?): {e}", file=source) from e
    mapping = _column_mapping(task, columns, source)
    names = {c: repr(k) for c, k in mapping.items()}
    missing = [k for k in mapping.values() if k not in dataset.column_names]
    if missing:
        raise DataError(f"missing column; the dataset has: {', '.join(dataset.column_names)}",
                        file=source, column=repr(missing[0]))  # fmt: skip
    records = ((row, lambda c, r=r: r[mapping[c]]) for row, r in enumerate(dataset, start=1))
    return _collect(task, records, names, source)


def _load_dir(
    directory: Path, task: TaskSpec, split: str, columns: Mapping[str, str] | None
) -> list[Example]:
    """A folder: the GLUE layout (root or task folder) when no mapping is given, else ``<split>.<ext>``."""
    # Every candidate is confined before it is looked at: whether a link's target exists is not ours to say.
    if columns is None and task.glue_dir is not None:
        if confine(directory / task.glue_dir / f"{split}.tsv").is_file():
            return load_glue_split(task, directory, split)
        if directory.name.lower() == task.glue_dir.lower() and confine(directory / f"{split}.tsv").is_file():
            return load_glue_split(task, directory.parent, split)
    stems = dict.fromkeys((split, task.hub_split(split)))  # "dev" also finds "validation.csv"
    candidates = [directory / f"{stem}{suffix}" for stem in stems for suffix in TABLE_SUFFIXES]
    for candidate in candidates:
        if confine(candidate).is_file():
            return load_table(candidate, task, columns)
    looked = [str(p.relative_to(directory)) for p in candidates]
    if columns is None and task.glue_dir is not None:
        looked.insert(0, f"{task.glue_dir}/{split}.tsv")
    raise DataError(f"no data for split {split!r}; looked for: {', '.join(looked)}", file=directory)


def load_examples(
    task: TaskSpec, source: str | Path, split: str, columns: Mapping[str, str] | None = None
) -> list[Example]:
    """Load one split of ``task`` from ``source``.

    * a folder: the GLUE layout (``<source>/<TASK>/<split>.tsv``, or ``source`` is the task folder)
      when ``columns`` is None and the task is a GLUE task; otherwise ``<split>.jsonl/.json/.csv/.tsv``
      inside it (``dev`` also matches ``validation``);
    * a file: read as a table, whatever ``split`` says;
    * a hub id: a Hugging Face dataset (``"hub"`` means the task's own dataset);
    * ``dataset:sha256:<digest>``: an uploaded dataset, fetched and verified (worker.training.datasets).
    Local or hub is decided by worker.contract.sources (a relative path is refused, as DataError).
    """
    if not isinstance(source, Path):
        try:
            kind = classify(source, "data")
        except SourceError as err:
            raise DataError(str(err)) from None
        if kind.kind == "dataset":  # an uploaded dataset: fetched by digest and verified, then a folder
            source = dataset_folder(kind.value, task)
        else:
            source = kind.path if kind.kind == "local" else source
    if isinstance(source, Path):
        path = confine(source)  # a folder that is itself a link out of the roots, too
        if path.is_dir():
            return _load_dir(path, task, split, columns)
        if path.is_file():
            return load_table(path, task, columns)
        raise DataError("no such file or folder", file=path)
    return load_hub(task, split, dataset_id=None if source == "hub" else source, columns=columns)
