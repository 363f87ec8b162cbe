"""The dataset store's two implementations: a local folder and S3 (moto's in-process S3 standing in for
MinIO). Writes are atomic and whole; reads verify the SHA-256; the worker fetches from S3 the same layout."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from fastapi.testclient import TestClient
from moto import mock_aws

from service.config import Settings
from service.datasets.store import LocalStore, ObjectStore, S3Store, StoreError, open_store, read, read_text
from tests.service.dataset_utils import expected_digest, push, rte_files
from tests.service.utils import auth
from worker.contract.sources import dataset_key, manifest_text
from worker.contract.tasks import get_task
from worker.training import datasets, files
from worker.training.data import load_examples


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        boto3.client("s3").create_bucket(Bucket="smartune")
        yield


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "s3":
        request.getfixturevalue("s3")
        return open_store("s3://smartune/datasets")
    return open_store(str(tmp_path / "store"))


def test_put_read_and_delete_round_trip(store: ObjectStore, tmp_path: Path) -> None:
    source = tmp_path / "train.tsv"
    source.write_bytes(b"a\tb\n" * 1000)
    sha = hashlib.sha256(source.read_bytes()).hexdigest()
    assert not store.exists("sha256/d/files/train.tsv")
    store.put("sha256/d/files/train.tsv", source)
    store.put("sha256/d/manifest", source)
    assert store.exists("sha256/d/files/train.tsv")
    read(store, "sha256/d/files/train.tsv", sha, tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == source.read_bytes()
    with pytest.raises(StoreError, match="does not match its SHA-256"):
        read(store, "sha256/d/files/train.tsv", "0" * 64, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    with pytest.raises(StoreError, match="does not match"):
        read_text(store, "sha256/d/manifest", "0" * 64)
    with pytest.raises(StoreError, match="no object"):
        list(store.chunks("sha256/d/files/none.tsv"))
    store.delete_prefix("sha256/d")
    assert not store.exists("sha256/d/files/train.tsv") and not store.exists("sha256/d/manifest")
    store.delete_prefix("sha256/absent")  # nothing to delete: no error


def test_a_local_write_leaves_no_partial_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(tmp_path / "store")
    source = tmp_path / "f"
    source.write_bytes(b"x" * 10)

    def fail(*_args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", fail)
    with pytest.raises(OSError, match="disk full"):
        store.put("sha256/d/files/f", source)
    assert (
        not store.exists("sha256/d/files/f")
        and list((tmp_path / "store" / "sha256" / "d" / "files").iterdir()) == []
    )
    with pytest.raises(StoreError, match="invalid key"):
        store.put("../outside", source)


def test_the_s3_prefix_and_bucket_are_parsed() -> None:
    store = S3Store("s3://bucket/some/prefix/", client=object())
    assert (store.bucket, store.prefix, store._key("sha256/x")) == (
        "bucket",
        "some/prefix",
        "some/prefix/sha256/x",
    )
    with pytest.raises(ValueError, match="s3://bucket"):
        S3Store("s3://")


def test_a_worker_fetches_a_dataset_from_s3(
    s3: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store("s3://smartune/datasets")
    contents = rte_files()
    digest = expected_digest(contents)
    entries = []
    for name, data in contents.items():
        (tmp_path / name).write_bytes(data)
        store.put(dataset_key(digest, name), tmp_path / name)
        entries.append((name, hashlib.sha256(data).hexdigest()))
    (tmp_path / "manifest").write_text(manifest_text(entries))
    store.put(dataset_key(digest), tmp_path / "manifest")
    monkeypatch.setenv(datasets.STORE_ENV, "s3://smartune/datasets")
    monkeypatch.setenv(datasets.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(files, "_FETCHED", [])
    assert len(load_examples(get_task("rte"), f"dataset:sha256:{digest}", "dev")) == 4
    boto3.client("s3").put_object(
        Bucket="smartune", Key=f"datasets/{dataset_key(digest, 'dev.tsv')}", Body=b"x"
    )
    (tmp_path / "cache" / digest / "RTE" / "dev.tsv").write_bytes(b"x")
    with pytest.raises(files.DataError, match="does not match its SHA-256"):
        datasets.dataset_folder(f"dataset:sha256:{digest}", get_task("rte"))
    with pytest.raises(files.DataError, match="not in the store"):
        datasets.dataset_folder("dataset:sha256:" + "b" * 64, get_task("rte"))


def test_an_upload_lands_in_an_s3_store(
    s3: None, client: TestClient, team_key: str, settings: Settings
) -> None:
    settings.dataset_store = "s3://smartune/datasets"
    made = push(client, team_key, rte_files()).json()
    key = f"datasets/sha256/{made['digest']}/files/train.tsv"
    assert (
        boto3.client("s3").get_object(Bucket="smartune", Key=key)["Body"].read() == rte_files()["train.tsv"]
    )
    assert client.delete("/api/v1/datasets/tiny-rte/1", headers=auth(team_key)).status_code == 200
    assert boto3.client("s3").list_objects_v2(Bucket="smartune", Prefix="datasets/").get("KeyCount") == 0
