"""Uploaded datasets on the worker: fetch one by its digest into a local cache, verify it, hand out its folder.

A job spec names an uploaded dataset as `dataset:sha256:<digest>` (the control plane pins `dataset:NAME`
to that at submission). The digest is the SHA-256 of the dataset's manifest (`worker.contract.sources.
manifest_text`: one `<sha256>  <name>` line per file), so a fetched copy is checked completely: the manifest
must hash to the digest, every file to its line, and the folder must hold those files and nothing else
(a stray `dev.jsonl` would be read before the verified `dev.tsv`). Checked on every use, cache hit or not.

Where the store is: `SMARTUNE_DATASET_STORE` (a local folder, or `s3://bucket/prefix`, read with boto3,
which takes `AWS_ENDPOINT_URL` and the credentials from the environment as the team stack sets them), else
`<SMARTUNE_DATA_DIR>/datasets` (the embedded default: the control plane's own store, on this machine).
The cache: `SMARTUNE_DATASET_CACHE`, else `~/.cache/smartune/datasets` (node-local). A dataset's folder is
`<cache>/<digest>/<task folder>` (the task's GLUE folder name, `RTE`, so GLUE TSVs are read the GLUE way,
exactly as the upload was validated). Each fetched folder is allowed to the data loader
(`files.allow_fetched`): only the datasets this process verified, never the whole cache.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

from worker.contract.sources import (
    DIGEST_PREFIX,
    FILE_NAME,
    dataset_key,
    manifest_text,
    parse_dataset_ref,
)
from worker.contract.tasks import TaskSpec
from worker.training.files import DataError, allow_fetched

STORE_ENV = "SMARTUNE_DATASET_STORE"
CACHE_ENV = "SMARTUNE_DATASET_CACHE"
BLOCK = 1 << 20  # bytes read at a time while hashing or copying


def store_uri(environ: Mapping[str, str] = os.environ) -> str:
    """The dataset store: `SMARTUNE_DATASET_STORE`, else `<SMARTUNE_DATA_DIR or ~/.smartune>/datasets`."""
    if value := environ.get(STORE_ENV, "").strip():
        return value
    data_dir = environ.get("SMARTUNE_DATA_DIR", "").strip() or "~/.smartune"
    return str(Path(data_dir).expanduser() / "datasets")


def cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    if value := environ.get(CACHE_ENV, "").strip():
        return Path(value).expanduser()
    base = environ.get("XDG_CACHE_HOME", "").strip() or "~/.cache"
    return Path(base).expanduser() / "smartune" / "datasets"


def folder_name(task: TaskSpec) -> str:
    """The folder a dataset of `task` is laid out in: the GLUE folder name (the loader then reads GLUE
    TSVs the GLUE way), else the task's name. The control plane validates uploads in the same layout."""
    return task.glue_dir or task.name


def parse_manifest(text: str, digest: str) -> list[tuple[str, str]]:
    """(name, sha256) per line of a manifest that hashes to `digest`; DataError otherwise."""
    if hashlib.sha256(text.encode()).hexdigest() != digest:
        raise DataError(f"dataset {DIGEST_PREFIX}{digest}: its manifest does not match the digest")
    entries = []
    for line in text.splitlines():
        sha, _, name = line.partition("  ")
        if not FILE_NAME.fullmatch(name) or len(sha) != 64:
            raise DataError(f"dataset {DIGEST_PREFIX}{digest}: malformed manifest line")
        entries.append((name, sha))
    if manifest_text(entries) != text:  # sorted, one line each: the canonical form only
        raise DataError(f"dataset {DIGEST_PREFIX}{digest}: the manifest is not in canonical form")
    return entries


def _read_object(store: str, key: str) -> Iterator[bytes]:
    """The bytes of `key` in the store, block by block; FileNotFoundError when it is absent."""
    if store.startswith("s3://"):
        yield from _read_s3(store, key)
        return
    with open(Path(store).expanduser() / key, "rb") as file:
        yield from iter(lambda: file.read(BLOCK), b"")


def _read_s3(store: str, key: str) -> Iterator[bytes]:
    try:
        import boto3  # optional (`smartune[s3]`); reads AWS_ENDPOINT_URL and the credentials itself
        from botocore.exceptions import ClientError
    except ImportError as err:
        raise DataError(f"{STORE_ENV}={store}: an S3 store needs boto3 (pip install 'smartune[s3]')") from err
    bucket, _, prefix = store.removeprefix("s3://").partition("/")
    full = f"{prefix.strip('/')}/{key}" if prefix.strip("/") else key
    try:
        body = boto3.client("s3").get_object(Bucket=bucket, Key=full)["Body"]
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NoSuchBucket"):
            raise FileNotFoundError(full) from None
        raise DataError(f"dataset store {store}: {err}") from None
    yield from iter(lambda: body.read(BLOCK), b"")


def _sha256(file: IO[bytes]) -> str:
    digest = hashlib.sha256()
    for block in iter(lambda: file.read(BLOCK), b""):
        digest.update(block)
    return digest.hexdigest()


def _verify(folder: Path, entries: list[tuple[str, str]], digest: str) -> None:
    """`folder` holds exactly the manifest's files, each with its SHA-256; DataError otherwise."""
    present = sorted(p.name for p in folder.iterdir())
    if present != sorted(name for name, _ in entries):
        raise DataError(
            f"dataset {DIGEST_PREFIX}{digest}: the cached folder does not hold its files", file=folder
        )
    for name, sha in entries:
        path = folder / name
        if path.is_symlink() or not path.is_file():
            raise DataError("not a regular file", file=path)
        with open(path, "rb") as file:
            if _sha256(file) != sha:
                raise DataError(f"does not match its SHA-256 in dataset {DIGEST_PREFIX}{digest}", file=path)


def _download(store: str, digest: str, entries: list[tuple[str, str]], target: Path) -> None:
    """Copy every file into `target`, checking each SHA-256 as it streams."""
    target.mkdir(parents=True)
    for name, sha in entries:
        hasher = hashlib.sha256()
        try:
            with open(target / name, "wb") as out:
                for block in _read_object(store, dataset_key(digest, name)):
                    hasher.update(block)
                    out.write(block)
        except FileNotFoundError:
            raise DataError(
                f"dataset {DIGEST_PREFIX}{digest}: {name} is missing from the store {store}"
            ) from None
        if hasher.hexdigest() != sha:
            raise DataError(
                f"dataset {DIGEST_PREFIX}{digest}: {name} in the store {store} does not match its SHA-256"
            )


def fetch(digest: str, task: TaskSpec, environ: Mapping[str, str] = os.environ) -> Path:
    """The verified local folder of dataset `digest`, laid out for `task`: fetched from the store unless a
    verified copy is cached. Concurrent fetches (trials on one node) each download into a temporary folder
    and rename it into place; the first rename wins and the others are discarded."""
    store = store_uri(environ)
    root = cache_dir(environ) / digest
    root.mkdir(parents=True, exist_ok=True)
    manifest = root / "manifest"
    if manifest.is_file():
        text = manifest.read_text(encoding="utf-8")
    else:
        try:
            text = b"".join(_read_object(store, dataset_key(digest))).decode("utf-8")
        except FileNotFoundError:
            raise DataError(f"dataset {DIGEST_PREFIX}{digest} is not in the store {store}") from None
    entries = parse_manifest(text, digest)
    if not manifest.is_file():
        _atomic_write(manifest, text)
    folder = root / folder_name(task)
    for again in (False, True):
        if not folder.is_dir():
            _fetch_into(store, digest, entries, folder)
        try:
            _verify(folder, entries, digest)
            break
        except DataError:
            if again:
                raise
            shutil.rmtree(folder, ignore_errors=True)  # a damaged copy in the cache: fetch it once more
    allow_fetched(folder)
    return folder


def _fetch_into(store: str, digest: str, entries: list[tuple[str, str]], folder: Path) -> None:
    staging = folder.parent / f".tmp-{secrets.token_hex(6)}"
    try:
        _download(store, digest, entries, staging)
        try:
            os.rename(staging, folder)
        except OSError:  # another process renamed its copy first: that one is verified instead
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _atomic_write(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def dataset_folder(value: str, task: TaskSpec, environ: Mapping[str, str] = os.environ) -> Path:
    """The local folder of the dataset a spec's `data` names (`dataset:sha256:<digest>` only: a worker
    never resolves a name, which the control plane pins to its digest at submission)."""
    try:
        ref = parse_dataset_ref(value)
    except ValueError as err:
        raise DataError(f"data: {err}") from None
    if ref is None:
        raise DataError(f"data: {value!r} is not a dataset reference")
    if ref.digest is None:
        raise DataError(
            f"data: {value!r} names a dataset by name; a worker reads datasets by digest only "
            "(submit through the control plane, which pins it, or give dataset:sha256:<digest>)"
        )
    return fetch(ref.digest, task, environ)
