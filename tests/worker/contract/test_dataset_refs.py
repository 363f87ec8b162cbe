"""The `dataset:` reference of a spec's `data` (worker.contract.sources): its three forms, its refusals, the
digest's definition (sha256sum's output, sorted by name), and a model field that cannot name a dataset."""

from __future__ import annotations

import hashlib

import pytest
from pydantic import ValidationError

from worker.contract.sources import (
    DatasetRef,
    SourceError,
    classify,
    dataset_digest,
    dataset_key,
    manifest_text,
    parse_dataset_ref,
)
from worker.contract.spec import JobSpec

DIGEST = "ab" * 32


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("dataset:rte-small", DatasetRef(name="rte-small")),
        ("dataset:rte.v2_x@12", DatasetRef(name="rte.v2_x", version=12)),
        (f"dataset:sha256:{DIGEST}", DatasetRef(digest=DIGEST)),
        ("  dataset:a  ", DatasetRef(name="a")),
    ],
)
def test_the_three_forms_parse_and_print_back(text: str, ref: DatasetRef) -> None:
    assert parse_dataset_ref(text) == ref and parse_dataset_ref(str(ref)) == ref
    assert classify(text, "data") == classify(str(ref), "data") and classify(text, "data").kind == "dataset"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("dataset:", "dataset name"),
        ("dataset:../x", "dataset name"),
        ("dataset:a@0", "whole number from 1"),
        ("dataset:a@one", "whole number from 1"),
        ("dataset:sha256:ABC", "64 lower-case hex"),
        ("dataset:sha256:" + "A" * 64, "64 lower-case hex"),
    ],
)
def test_malformed_references_are_refused_naming_the_field(text: str, needle: str) -> None:
    with pytest.raises(SourceError, match=f"^data: .*{needle}"):
        classify(text, "data")
    with pytest.raises(ValidationError, match=needle):
        JobSpec(task="rte", data=text)


def test_other_values_are_no_reference_and_a_model_cannot_be_one() -> None:
    assert parse_dataset_ref("/srv/glue") is None and parse_dataset_ref("nyu-mll/glue") is None
    with pytest.raises(SourceError, match="^model: .*names an uploaded dataset"):
        classify("dataset:rte-small", "model", aliases=True)
    with pytest.raises(ValidationError, match="model"):
        JobSpec(task="rte", model="dataset:rte-small")
    assert JobSpec(task="rte", data="dataset:rte-small@3").data == "dataset:rte-small@3"


def test_the_digest_is_the_sha256_of_sha256sums_output_sorted_by_name() -> None:
    train, dev = hashlib.sha256(b"t").hexdigest(), hashlib.sha256(b"d").hexdigest()
    text = manifest_text([("train.tsv", train), ("dev.tsv", dev)])
    assert text == f"{dev}  dev.tsv\n{train}  train.tsv\n"
    assert (
        dataset_digest([("train.tsv", train), ("dev.tsv", dev)]) == hashlib.sha256(text.encode()).hexdigest()
    )
    assert dataset_digest([("dev.tsv", dev), ("train.tsv", train)]) == dataset_digest(
        [("train.tsv", train), ("dev.tsv", dev)]
    )
    assert dataset_digest([("train.tsv", dev), ("dev.tsv", train)]) != dataset_digest(
        [("train.tsv", train), ("dev.tsv", dev)]
    )
    assert dataset_key(DIGEST) == f"sha256/{DIGEST}/manifest"
    assert dataset_key(DIGEST, "dev.tsv") == f"sha256/{DIGEST}/files/dev.tsv"
