"""An upload's body: streamed to disk under a size limit, then split into its multipart/form-data parts.

The body is never held in memory: `receive` writes it to a file (413 naming the limit as soon as it runs
past it, or at once when Content-Length says so), and `split` finds the parts in that file through mmap,
copying each file part to the staging folder while hashing it. Standard library only (the service ships
no multipart parser); the few form fields are small text. Every malformed body is a 4xx naming the field.
"""

from __future__ import annotations

import email.message
import email.parser
import email.policy
import hashlib
import mmap
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from service.errors import ApiError
from worker.contract.sources import FILE_NAME

FIELD_LIMIT = 16 * 1024  # bytes of one text field (description included)
HEADER_LIMIT = 16 * 1024  # bytes of one part's headers
BLOCK = 1 << 20


@dataclass(frozen=True)
class StagedFile:
    name: str  # as uploaded: a plain file name (worker.contract.sources.FILE_NAME)
    path: Path
    sha256: str
    size: int  # bytes


@dataclass
class Form:
    fields: dict[str, str] = field(default_factory=dict)
    files: list[StagedFile] = field(default_factory=list)


def too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        f"the upload is larger than this deployment's limit of {limit} bytes"
        + (f" ({limit / 2**20:g} MiB)" if limit >= 2**20 else "")
        + " (SMARTUNE_DATASET_MAX_BYTES)",
        field="files",
        extra={"limit_bytes": limit},
    )


def boundary_of(content_type: str | None) -> bytes:
    """The multipart boundary of a `multipart/form-data` Content-Type; 415 for any other type."""
    message = email.message.Message()
    message["content-type"] = content_type or ""
    boundary = message.get_param("boundary")
    if message.get_content_type() != "multipart/form-data" or not isinstance(boundary, str) or not boundary:
        raise ApiError(
            415,
            "an upload is multipart/form-data (fields name, task, description; one or more `files`)",
            field="header.content-type",
        )
    if len(boundary) > 200:
        raise ApiError(
            400, "the multipart boundary is longer than 200 characters", field="header.content-type"
        )
    return boundary.encode("latin-1")


async def receive(stream: AsyncIterator[bytes], target: Path, *, declared: str | None, limit: int) -> int:
    """Write the body to `target`; return its size. 413 (the limit named) past `limit` bytes."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    size = 0
    async with await anyio.open_file(target, "wb") as out:
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            await out.write(chunk)
    return size


def _disposition(headers: bytes) -> tuple[str, str | None]:
    """The part's form field name and, for a file, its file name."""
    parsed = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(headers + b"\r\n\r\n")
    name = parsed.get_param("name", header="content-disposition")
    filename = parsed.get_filename()
    if parsed.get_content_disposition() != "form-data" or not isinstance(name, str):
        raise ApiError(
            400, "a multipart part without `Content-Disposition: form-data; name=...`", field="files"
        )
    return name, filename


def _copy(view: memoryview, target: Path) -> StagedFile:
    digest = hashlib.sha256()
    with open(target, "wb") as out:
        for start in range(0, len(view), BLOCK):
            block = view[start : start + BLOCK]
            digest.update(block)
            out.write(block)
    return StagedFile(target.name, target, digest.hexdigest(), len(view))


def split(body: Path, boundary: bytes, staging: Path, *, max_files: int) -> Form:
    """The parts of the multipart body in the file `body`: text fields, and files copied into `staging`."""
    form = Form()
    if body.stat().st_size == 0:
        raise ApiError(422, "files: the upload is empty", field="files")
    delimiter = b"--" + boundary
    with open(body, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        start = data.find(delimiter)
        if start < 0 or (start > 0 and data[start - 2 : start] != b"\r\n"):
            raise ApiError(
                400, "the body holds no part delimited by the Content-Type's boundary", field="files"
            )
        position = start + len(delimiter)
        while data[position : position + 2] != b"--":  # `--boundary--` closes the body
            if data[position : position + 2] != b"\r\n":
                raise ApiError(
                    400, "malformed multipart body (a delimiter not followed by CRLF)", field="files"
                )
            head_end = data.find(b"\r\n\r\n", position + 2, position + 2 + HEADER_LIMIT)
            if head_end < 0:
                raise ApiError(400, "malformed multipart body (a part's headers never end)", field="files")
            name, filename = _disposition(data[position + 2 : head_end])
            content = head_end + 4
            end = data.find(b"\r\n" + delimiter, content)
            if end < 0:
                raise ApiError(400, "truncated multipart body (no closing delimiter)", field="files")
            _take(form, name, filename, memoryview(data)[content:end], staging, max_files)
            position = end + 2 + len(delimiter)
    return form


def _take(
    form: Form, name: str, filename: str | None, value: memoryview, staging: Path, max_files: int
) -> None:
    try:
        if filename is None:
            if name in form.fields:
                raise ApiError(422, f"{name}: given more than once", field=name)
            if len(value) > FIELD_LIMIT:
                raise ApiError(422, f"{name}: longer than {FIELD_LIMIT} bytes", field=name)
            try:
                form.fields[name] = bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                raise ApiError(422, f"{name}: not UTF-8 text", field=name) from None
            return
        if name != "files":
            raise ApiError(422, f"{name}: a file in a field other than `files`", field=name)
        if not FILE_NAME.fullmatch(filename):
            raise ApiError(422, f"files: {filename!r} is not a plain file name (letters, digits, '.', '_', "
                                "'-'; no folder)", field="files")  # fmt: skip
        if any(f.name == filename for f in form.files):
            raise ApiError(422, f"files: {filename!r} is uploaded twice", field="files")
        if len(form.files) >= max_files:
            raise ApiError(
                422, f"files: more than {max_files} files (SMARTUNE_DATASET_MAX_FILES)", field="files"
            )
        form.files.append(_copy(value, staging / filename))
    finally:
        value.release()  # the mmap cannot close while a view of it lives
