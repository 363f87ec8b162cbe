"""A place that holds a team's files, read as (relative path, bytes) pairs and cut by folder: a local folder
(the embedded default), or an S3 prefix (Tune storage in the team stack: MinIO). One walk or one listing
gives both a total (`measure`) and a job's checkpoint folders (`retention`).

Sizes are the files' own (st_size, S3's `Size`), not the blocks a file system allocates. A walk never
follows a symbolic link, and a file removed while it walks is skipped. boto3 is imported only for an
`s3://` tree, with the endpoint and credentials from the environment (AWS_ENDPOINT_URL, ...), as the
dataset store and Tune's storage take them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

S3_BATCH = 1000  # keys per DeleteObjects call (S3's limit)


class Tree(Protocol):
    uri: str

    def files(self, under: str = "") -> Iterator[tuple[str, int]]:
        """Every file below the folder `under` ("" = the whole tree): (path relative to the tree, bytes)."""

    def remove(self, folder: str) -> None:
        """Delete the folder `folder` (relative to the tree) and everything below it."""


def _relative(folder: str) -> str:
    parts = [p for p in folder.strip("/").split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise ValueError(f"invalid folder {folder!r}")
    return "/".join(parts)


class LocalTree:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.uri = str(root)

    def files(self, under: str = "") -> Iterator[tuple[str, int]]:
        base = _relative(under)
        stack = [base]
        while stack:
            folder = stack.pop()
            try:
                entries = list(os.scandir(self.root / folder))
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue
            for entry in entries:
                path = f"{folder}/{entry.name}" if folder else entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(path)
                    elif entry.is_file(follow_symlinks=False):
                        yield path, entry.stat(follow_symlinks=False).st_size
                except OSError:  # removed meanwhile
                    continue

    def remove(self, folder: str) -> None:
        relative = _relative(folder)
        if relative:  # never the tree itself
            shutil.rmtree(self.root / relative, ignore_errors=True)


class S3Tree:
    def __init__(self, uri: str, client: Any | None = None) -> None:
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        if not bucket:
            raise ValueError(f"{uri!r}: an S3 location is s3://bucket or s3://bucket/prefix")
        self.uri, self.bucket, self.prefix = uri, bucket, prefix.strip("/")
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3  # the service image installs `smartune[s3]` where Tune's storage is in S3

            self._client = boto3.client("s3")
        return self._client

    def _keys(self, under: str) -> Iterator[tuple[str, int]]:
        """(key, bytes) of every object below the folder `under`."""
        folder = "/".join(p for p in (self.prefix, _relative(under)) if p)
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{folder}/" if folder else ""
        )
        for page in pages:
            for item in page.get("Contents", []):
                yield str(item["Key"]), int(item["Size"])

    def files(self, under: str = "") -> Iterator[tuple[str, int]]:
        skip = len(self.prefix) + 1 if self.prefix else 0
        for key, size in self._keys(under):
            yield key[skip:], size

    def remove(self, folder: str) -> None:
        if not _relative(folder):
            return  # never the tree itself
        keys = [key for key, _ in self._keys(folder)]
        for start in range(0, len(keys), S3_BATCH):
            batch = [{"Key": key} for key in keys[start : start + S3_BATCH]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})


def open_tree(location: str) -> Tree | None:
    """The tree a location names: `s3://bucket/prefix`, `file:///folder` or a folder; None for another
    scheme (gs://, ...), which is not measured."""
    if location.startswith("s3://"):
        return S3Tree(location)
    if location.startswith("file://"):
        return LocalTree(Path(urlparse(location).path))
    if "://" in location:
        return None
    return LocalTree(Path(location).expanduser())


def total(tree: Tree | None, under: str = "") -> int:
    """Bytes of every file below `under` (0 for a tree that is not measured)."""
    return 0 if tree is None else sum(size for _, size in tree.files(under))
