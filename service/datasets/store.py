"""The dataset store: objects under keys (`sha256/<digest>/manifest`, `sha256/<digest>/files/<name>`), in a
local folder (the embedded default) or an S3 bucket (MinIO in the team stack). Nothing here knows a job.

Writes are atomic: a local object is written to a temporary name beside it and renamed; an S3 PUT is
atomic by itself. A dataset's manifest is written last, so a manifest present means every file is there.
Reads verify: `read` streams an object to a file while hashing it and refuses one whose SHA-256 is not the
expected one. boto3 is imported only for an `s3://` store (`pip install 'smartune[s3]'`); it takes the
endpoint and credentials from the environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...), like MLflow's
artifacts and Tune's storage in the team stack. The worker reads the same layout itself
(worker.training.datasets): the control plane imports nothing of the worker but its contract.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

BLOCK = 1 << 20  # bytes per read or write


class StoreError(RuntimeError):
    """An object is missing, or does not match its digest, or the store cannot be reached."""


class ObjectStore(Protocol):
    uri: str

    def put(self, key: str, source: Path) -> None:
        """Store the file `source` under `key`, atomically (readers see all of it or nothing)."""

    def exists(self, key: str) -> bool: ...

    def chunks(self, key: str) -> Iterator[bytes]:
        """The object's bytes, block by block; StoreError when it is absent."""

    def delete_prefix(self, prefix: str) -> None:
        """Remove every object whose key starts with `prefix/` (nothing when there is none)."""


def read(store: ObjectStore, key: str, sha256: str, target: Path) -> None:
    """Copy the object `key` to `target`, verifying its SHA-256 (StoreError, and no `target`, otherwise)."""
    digest = hashlib.sha256()
    with open(target, "wb") as out:
        for block in store.chunks(key):
            digest.update(block)
            out.write(block)
    if digest.hexdigest() != sha256:
        target.unlink()
        raise StoreError(f"{store.uri}: {key} does not match its SHA-256 (the store's copy is damaged)")


def read_text(store: ObjectStore, key: str, sha256: str) -> str:
    """A small object (a manifest) as text, verified against its SHA-256."""
    data = b"".join(store.chunks(key))
    if hashlib.sha256(data).hexdigest() != sha256:
        raise StoreError(f"{store.uri}: {key} does not match its SHA-256 (the store's copy is damaged)")
    return data.decode("utf-8")


class LocalStore:
    """A folder: an object is a file at `<root>/<key>`."""

    def __init__(self, root: Path) -> None:
        self.root = root.expanduser()
        self.uri = str(self.root)

    def _path(self, key: str) -> Path:
        if key.startswith("/") or ".." in key.split("/"):
            raise StoreError(f"invalid key {key!r}")
        return self.root / key

    def put(self, key: str, source: Path) -> None:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            shutil.copyfile(source, temporary)
            with open(temporary, "rb") as file:
                os.fsync(file.fileno())
            os.replace(temporary, target)  # atomic on one file system
        finally:
            temporary.unlink(missing_ok=True)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def chunks(self, key: str) -> Iterator[bytes]:
        try:
            file = open(self._path(key), "rb")  # noqa: SIM115 (closed below, after the last block)
        except FileNotFoundError:
            raise StoreError(f"{self.uri}: no object {key}") from None
        with file:
            yield from iter(lambda: file.read(BLOCK), b"")

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self._path(prefix), ignore_errors=True)


class S3Store:
    """An S3 bucket (MinIO in the team stack): an object is `<prefix>/<key>` in `bucket`."""

    def __init__(self, uri: str, client: Any | None = None) -> None:
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        if not bucket:
            raise ValueError(f"{uri!r}: an S3 store is s3://bucket or s3://bucket/prefix")
        self.uri, self.bucket, self.prefix = uri, bucket, prefix.strip("/")
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                import boto3
            except ImportError as err:  # the service image installs `smartune[s3]` for an S3 store
                raise StoreError(f"{self.uri}: an S3 store needs boto3 (pip install 'smartune[s3]')") from err
            self._client = boto3.client("s3")
        return self._client

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def put(self, key: str, source: Path) -> None:
        self.client.upload_file(str(source), self.bucket, self._key(key))  # multipart above 8 MiB

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise StoreError(f"{self.uri}: {err}") from None
        return True

    def chunks(self, key: str) -> Iterator[bytes]:
        from botocore.exceptions import ClientError

        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
        except ClientError as err:
            raise StoreError(f"{self.uri}: no object {key} ({err})") from None
        yield from iter(lambda: body.read(BLOCK), b"")

    def delete_prefix(self, prefix: str) -> None:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self._key(prefix).rstrip("/") + "/"
        )
        for page in pages:
            keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if keys:
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys})


def open_store(uri: str) -> ObjectStore:
    """The store a URI names: `s3://bucket/prefix`, else a local folder."""
    return S3Store(uri) if uri.startswith("s3://") else LocalStore(Path(uri))
