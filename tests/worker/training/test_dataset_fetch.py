"""A trial's uploaded dataset: fetched by digest into the local cache, verified on every use, read by the
same loader as any data, allowed past the data-root confinement (only the fetched folder), and recorded in
provenance. The store is written with the service's LocalStore, as the control plane writes it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from service.datasets import validate
from service.datasets.store import LocalStore
from tests.service.dataset_utils import expected_digest, rte_files, rte_tsv
from worker.contract.sources import dataset_key, manifest_text
from worker.contract.tasks import TASKS, get_task
from worker.contract.trial import TrainConfig
from worker.training import dataset_check, datasets, files
from worker.training.data import load_examples
from worker.training.files import DataError, confine
from worker.training.provenance import dataset_provenance
from worker.training.trial_data import data_files

RTE = get_task("rte")


def put(root: Path, tmp: Path, contents: dict[str, bytes]) -> str:
    """Write a dataset into a local store the way service.datasets.ops does; return its digest."""
    store = LocalStore(root)
    entries = [(name, hashlib.sha256(data).hexdigest()) for name, data in contents.items()]
    digest = expected_digest(contents)
    for name, data in contents.items():
        (tmp / name).write_bytes(data)
        store.put(dataset_key(digest, name), tmp / name)
    (tmp / "manifest").write_text(manifest_text(entries))
    store.put(dataset_key(digest), tmp / "manifest")
    return digest


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "store"
    (tmp_path / "scratch").mkdir()
    monkeypatch.setenv(datasets.STORE_ENV, str(root))
    monkeypatch.setenv(datasets.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(files, "_FETCHED", [])
    return root


def test_a_dataset_is_fetched_verified_and_read_by_the_training_loader(store: Path, tmp_path: Path) -> None:
    digest = put(store, tmp_path / "scratch", rte_files())
    ref = f"dataset:sha256:{digest}"
    folder = datasets.dataset_folder(ref, RTE)
    assert folder == tmp_path / "cache" / digest / "RTE"  # the GLUE folder name: GLUE TSVs read the GLUE way
    assert sorted(p.name for p in folder.iterdir()) == ["dev.tsv", "train.tsv"]
    assert len(load_examples(RTE, ref, "train")) == 8 and len(load_examples(RTE, ref, "dev")) == 4
    config = TrainConfig(task="rte", data=ref)
    assert [p.name for p in data_files(config, RTE)] == ["train.tsv", "dev.tsv"]
    assert dataset_provenance(ref) == {"dataset_sha256": digest}
    assert dataset_provenance("/abs/folder") == {} and dataset_provenance(None) == {}


def test_a_damaged_cache_is_fetched_again_and_a_damaged_store_is_refused(store: Path, tmp_path: Path) -> None:
    digest = put(store, tmp_path / "scratch", rte_files())
    ref = f"dataset:sha256:{digest}"
    folder = datasets.dataset_folder(ref, RTE)
    (folder / "train.tsv").write_bytes(rte_tsv(8, offset=1))  # tampered in the cache
    (folder / "dev.jsonl").write_text("{}")  # a stray file the loader would read before dev.tsv
    assert datasets.dataset_folder(ref, RTE) == folder
    assert (folder / "train.tsv").read_bytes() == rte_files()["train.tsv"] and not (
        folder / "dev.jsonl"
    ).exists()
    (store / dataset_key(digest, "train.tsv")).write_bytes(b"tampered")  # and now in the store as well
    (folder / "train.tsv").write_bytes(b"tampered")
    with pytest.raises(DataError, match="does not match its SHA-256"):
        datasets.dataset_folder(ref, RTE)


def test_a_manifest_must_hash_to_the_digest(store: Path, tmp_path: Path) -> None:
    digest = put(store, tmp_path / "scratch", rte_files())
    (store / dataset_key(digest)).write_text(manifest_text([("train.tsv", "0" * 64)]))
    with pytest.raises(DataError, match="manifest does not match the digest"):
        datasets.dataset_folder(f"dataset:sha256:{digest}", RTE)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("dataset:sha256:" + "a" * 64, "is not in the store"),
        ("dataset:tiny-rte", "by digest only"),
        ("dataset:sha256:xyz", "64 lower-case hex"),
    ],
)
def test_what_cannot_be_fetched_is_a_data_error(store: Path, value: str, needle: str) -> None:
    with pytest.raises(DataError, match=needle):
        load_examples(RTE, value, "train")


def test_only_the_fetched_folder_passes_the_confinement(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    allowed = tmp_path / "roots"
    allowed.mkdir()
    monkeypatch.setenv(files.DATA_ROOTS_ENV, str(allowed))
    digest = put(store, tmp_path / "scratch", rte_files())
    other = put(store, tmp_path / "scratch", rte_files(offset=1))
    assert len(load_examples(RTE, f"dataset:sha256:{digest}", "train")) == 8
    cached_other = tmp_path / "cache" / other / "RTE"
    cached_other.mkdir(parents=True)  # a folder in the cache this process never verified
    with pytest.raises(DataError, match="outside the allowed data roots"):
        confine(cached_other / "train.tsv")
    with pytest.raises(DataError, match="outside the allowed data roots"):
        confine(store / dataset_key(digest, "train.tsv"))  # the store itself is no data root


def test_the_layout_rule_is_the_same_on_both_sides() -> None:
    assert all(datasets.folder_name(task) == validate.folder_name(task) for task in TASKS.values())


def test_the_upload_checker_names_the_file_row_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "RTE"
    folder.mkdir()
    (folder / "train.tsv").write_bytes(rte_tsv(3))
    (folder / "dev.tsv").write_bytes(rte_tsv(2) + b"2\ta\tb\tperhaps\n")
    assert dataset_check.main(["--task", "rte", str(folder)]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert (error["file"], error["row"], error["column"]) == ("dev.tsv", 4, "'label'")
    assert str(tmp_path) not in error["message"] and "perhaps" not in error["message"]
    (folder / "dev.tsv").write_bytes(rte_tsv(2))
    assert dataset_check.main(["--task", "rte", str(folder)]) == 0
    assert json.loads(capsys.readouterr().out) == {"rows": {"train": 3, "dev": 2}}
