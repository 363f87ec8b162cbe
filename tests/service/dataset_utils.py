"""Tiny GLUE-style RTE files and an upload helper for the dataset tests (service, CLI, integration)."""

from __future__ import annotations

import hashlib
from typing import Any

from fastapi.testclient import TestClient

from tests.service.utils import auth

HEADER = "index\tsentence1\tsentence2\tlabel\n"
PAIRS = [
    ("A cat sat on the mat.", "A cat is sitting.", "entailment"),
    ("The sky is green.", "The sky is blue.", "not_entailment"),
    ("Paris is in France.", "Paris is a city.", "entailment"),
    ("He ran home fast.", "He walked slowly.", "not_entailment"),
]


def rte_tsv(n: int = 4, offset: int = 0) -> bytes:
    """A GLUE-format RTE TSV with `n` rows (the pairs repeated); `offset` changes the content."""
    lines = [HEADER]
    for i in range(n):
        a, b, label = PAIRS[(i + offset) % len(PAIRS)]
        lines.append(f"{i}\t{a}\t{b}\t{label}\n")
    return "".join(lines).encode()


def rte_files(offset: int = 0) -> dict[str, bytes]:
    return {"train.tsv": rte_tsv(8, offset), "dev.tsv": rte_tsv(4)}


def expected_digest(files: dict[str, bytes]) -> str:
    """The documented digest, computed independently: SHA-256 of `sha256sum`'s output sorted by name."""
    lines = "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def push(
    client: TestClient,
    key: str,
    files: dict[str, bytes],
    *,
    name: str = "tiny-rte",
    task: str = "rte",
    expect: int | None = 201,
    **fields: str,
) -> Any:
    response = client.post(
        "/api/v1/datasets",
        headers=auth(key),
        data={"name": name, "task": task, **fields},
        files=[("files", (file_name, data)) for file_name, data in files.items()],
    )
    if expect is not None:
        assert response.status_code == expect, response.text
    return response
