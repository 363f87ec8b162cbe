"""A dataset upload's body, built as a stream: multipart/form-data with its length known up front (the
server refuses an oversized upload before a byte is sent), read from disk block by block, reporting progress.
Standard library only."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

UploadProgress = Callable[[int, int], object]  # (bytes sent, bytes in all)
TABLES = (".tsv", ".csv", ".jsonl", ".json")  # what a dataset's files may be
BLOCK = 1 << 20


def dataset_files(path: str | os.PathLike[str]) -> tuple[list[Path], list[Path]]:
    """The files to push from `path` and those skipped: a file is itself; a folder gives its table files
    (not subfolders), except test splits (`test*`: GLUE's have no labels). The server checks the names
    against the task's splits."""
    given = Path(path).expanduser()
    if given.is_file():
        return [given], []
    if not given.is_dir():
        raise FileNotFoundError(f"{given}: no such file or folder")
    tables = sorted(p for p in given.iterdir() if p.is_file() and p.suffix.lower() in TABLES)
    chosen = [p for p in tables if not p.name.lower().startswith("test")]
    skipped = [p for p in sorted(given.iterdir()) if p not in chosen]
    if not chosen:
        raise FileNotFoundError(f"{given}: no .tsv, .csv or .jsonl file to push (test splits are skipped)")
    return chosen, skipped


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\r", " ").replace("\n", " ")


def multipart(
    fields: Mapping[str, str], files: Sequence[Path], progress: UploadProgress | None = None
) -> tuple[str, int, Callable[[], Iterator[bytes]]]:
    """(Content-Type, Content-Length, a function giving the body afresh: a retry sends it again)."""
    boundary = f"smartune-{secrets.token_hex(16)}"
    heads: list[bytes] = []
    for name, value in fields.items():
        heads.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{_quote(name)}"\r\n\r\n{value}\r\n'.encode()
        )
    file_heads = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{_quote(p.name)}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n".encode()
        for p in files
    ]
    tail = f"--{boundary}--\r\n".encode()
    sizes = [p.stat().st_size for p in files]
    total = sum(map(len, heads)) + sum(map(len, file_heads)) + sum(sizes) + 2 * len(files) + len(tail)

    def body() -> Iterator[bytes]:
        sent = 0

        def step(block: bytes) -> bytes:
            nonlocal sent
            sent += len(block)
            if progress is not None:
                progress(sent, total)
            return block

        yield step(b"".join(heads))
        for head, path in zip(file_heads, files, strict=True):
            yield step(head)
            with open(path, "rb") as file:
                for block in iter(lambda: file.read(BLOCK), b""):  # noqa: B023 (used at once)
                    yield step(block)
            yield step(b"\r\n")
        yield step(tail)

    return f"multipart/form-data; boundary={boundary}", total, body
