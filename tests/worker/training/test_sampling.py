"""Which rows a run uses: `max_train_samples` / `max_eval_samples` as a seeded sample stratified by source
genre and label (or the first N with `sampling: head`), the held-out validation rows, and their digests."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from worker.contract.tasks import get_task
from worker.contract.trial import TrainConfig
from worker.training.data import load_glue_split
from worker.training.prepared import data_key, eval_examples, train_examples, training_rows
from worker.training.sampling import allocate, rows_sha256, select_rows, split_validation

# A synthetic STS-B train.tsv ordered by genre, as GLUE's is: the first rows are all captions.
GENRES = {"main-captions": 500, "main-news": 300, "main-forum": 200}
STSB_HEADER = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
# A synthetic CoLA train.tsv (no header: source, label, mark, sentence), ordered by source.
COLA_SOURCES = {"aa01": (240, 60), "bb02": (90, 60), "cc03": (30, 20)}  # source -> (acceptable, not)


def _stsb(folder: Path, split: str = "train", genre: bool = True) -> Path:
    lines, i = [], 0
    for name, count in GENRES.items():
        for _ in range(count):
            fields = [str(i), name, "f", "2012", "0", "none", "none", f"a {i}", f"b {i}", f"{i % 6}.0"]
            lines.append("\t".join(fields if genre else fields[:1] + fields[2:]))
            i += 1
    header = STSB_HEADER if genre else STSB_HEADER.replace("genre\t", "")
    path = folder / "STS-B" / f"{split}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + "\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _cola(folder: Path, split: str = "train") -> Path:
    lines = []
    for source, (good, bad) in COLA_SOURCES.items():
        lines += [f"{source}\t1\t\tgood {source} {i}." for i in range(good)]
        lines += [f"{source}\t0\t*\tbad {source} {i}." for i in range(bad)]
    path = folder / "CoLA" / f"{split}.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _config(data: Path, task: str = "stsb", **kw: Any) -> TrainConfig:
    return TrainConfig(task=task, data=str(data), model="tiny-random", **kw)


def _within_one(counts: Counter[Any], sizes: dict[Any, int], n: int) -> None:
    total = sum(sizes.values())
    for key, size in sizes.items():
        assert abs(counts[key] - n * size / total) <= 1, (key, counts[key], n * size / total)


def test_the_default_sample_spans_every_genre_in_proportion(tmp_path: Path) -> None:
    """Fails if `max_train_samples` takes file order by default: the first 100 rows are all captions."""
    config = _config(_stsb(tmp_path), max_train_samples=100)
    assert config.sampling == "random"
    examples = train_examples(config, get_task("stsb"))
    assert len(examples) == 100
    _within_one(Counter(e.stratum for e in examples), GENRES, 100)


def test_a_classification_sample_keeps_each_source_and_label_share(tmp_path: Path) -> None:
    sizes = {(s, label): n for s, (good, bad) in COLA_SOURCES.items() for label, n in ((1, good), (0, bad))}
    for n in (50, 77, 123):
        examples = train_examples(_config(_cola(tmp_path), "cola", max_train_samples=n), get_task("cola"))
        assert len(examples) == n
        _within_one(Counter((e.stratum, e.label) for e in examples), sizes, n)


def test_the_rows_are_the_same_for_every_trial_seed_and_method_and_follow_fraction_seed(
    tmp_path: Path,
) -> None:
    data, task = _stsb(tmp_path), get_task("stsb")
    base = train_examples(_config(data, max_train_samples=100), task)
    for other in ({"seed": 7}, {"method": "vanilla"}, {"learning_rate": 1e-3}):
        assert train_examples(_config(data, max_train_samples=100, **other), task) == base
    assert train_examples(_config(data, max_train_samples=100, fraction_seed=14), task) != base


def test_head_takes_the_first_rows_in_file_order(tmp_path: Path) -> None:
    data, task = _stsb(tmp_path), get_task("stsb")
    every = load_glue_split(task, data, "train")
    assert train_examples(_config(data, max_train_samples=100, sampling="head"), task) == every[:100]
    dev = load_glue_split(task, _stsb(tmp_path, "dev"), "dev")
    assert eval_examples(_config(data, max_eval_samples=30, sampling="head"), task, "dev") == dev[:30]


@pytest.mark.parametrize("n", [1, 2, 3, 99, 100, 101, 997, 999])
def test_exactly_n_rows_in_file_order(n: int) -> None:
    keys = [("g", 0)] * 500 + [("h", 1)] * 333 + [("i", 0)] * 167
    rows = select_rows(keys, n, seed=13, how="random")
    assert len(rows) == n == len(set(rows)) and rows == sorted(rows)
    assert select_rows(keys, 5000, seed=13, how="random") == list(range(1000))  # more than the split: all
    assert select_rows(keys, None, seed=13, how="head") == list(range(1000))
    with pytest.raises(ValueError, match="at least 1"):
        select_rows(keys, 0, seed=13, how="random")


def test_largest_remainder_shares() -> None:
    assert allocate([5, 3, 2], 5) == [3, 1, 1]  # 2.5, 1.5, 1.0: the tie goes to the stratum seen first
    assert allocate([1, 1, 1], 2) == [1, 1, 0]
    assert allocate([10, 0, 7], 17) == [10, 0, 7] and allocate([3, 4], 100) == [3, 4]
    assert allocate([6023, 2528], 1000) == [704, 296]  # CoLA's labels: 704.4 and 295.6
    for n in range(0, 60, 7):
        shares = allocate([13, 29, 1, 17], n)
        assert sum(shares) == n and all(
            0 <= s <= size for s, size in zip(shares, [13, 29, 1, 17], strict=True)
        )


def test_the_validation_rows_are_held_out_stratified_and_the_same_for_every_seed(tmp_path: Path) -> None:
    data, task = _stsb(tmp_path), get_task("stsb")
    every = load_glue_split(task, data, "train")
    sampled = training_rows(_config(data, max_train_samples=400), task, every)
    split = training_rows(_config(data, max_train_samples=400, validation_fraction=0.25), task, every)
    assert len(split.validation) == 100 and len(split.train) == 300
    assert not {e.texts for e in split.train} & {e.texts for e in split.validation}
    assert sorted(e.texts for e in split.train + split.validation) == sorted(e.texts for e in sampled.train)
    _within_one(Counter(e.stratum for e in split.validation), GENRES, 100)
    for other in ({"seed": 2}, {"seed": 3, "method": "vanilla"}):
        again = training_rows(
            _config(data, max_train_samples=400, validation_fraction=0.25, **other), task, every
        )
        assert again == split
    position = {e.texts: i for i, e in enumerate(every)}
    assert split.digests == {
        "train_rows_sha256": rows_sha256(position[e.texts] for e in split.train),
        "validation_rows_sha256": rows_sha256(position[e.texts] for e in split.validation),
    }
    assert sampled.digests.keys() == {"train_rows_sha256"} and sampled.validation == []


def test_split_validation_bounds() -> None:
    keys = [("g", None)] * 10
    train, held = split_validation(keys, [0, 1], 0.01, seed=1)  # rounds to 0: one row is held out anyway
    assert len(train) == len(held) == 1 and sorted(train + held) == [0, 1]
    train, held = split_validation(keys, list(range(10)), 0.99, seed=1)
    assert len(train) == 1 and len(held) == 9  # at least one row is left to train on
    with pytest.raises(ValueError, match="at least 2"):
        split_validation(keys, [3], 0.5, seed=1)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        split_validation(keys, list(range(10)), 0.0, seed=1)


def test_the_row_digest_is_of_the_sorted_positions() -> None:
    digest = rows_sha256([3, 1, 2])
    assert digest == rows_sha256([1, 2, 3]) != rows_sha256([1, 2, 4])
    assert re.fullmatch("[0-9a-f]{64}", digest)
    assert digest == hashlib.sha256(b"1,2,3").hexdigest()


def test_a_capped_eval_split_is_a_stratified_sample_the_same_for_every_trial(tmp_path: Path) -> None:
    data, task = _stsb(tmp_path, "dev"), get_task("stsb")
    capped = eval_examples(_config(data, max_eval_samples=50), task, "dev")
    assert len(capped) == 50 and capped == eval_examples(
        _config(data, max_eval_samples=50, seed=9), task, "dev"
    )
    _within_one(Counter(e.stratum for e in capped), GENRES, 50)
    assert len(eval_examples(_config(data), task, "dev")) == 1000  # uncapped: every row


def test_files_without_a_source_column_are_stratified_by_label_only(tmp_path: Path) -> None:
    task = get_task("stsb")
    examples = load_glue_split(task, _stsb(tmp_path, genre=False), "train")  # a header without `genre`
    assert len(examples) == 1000 and {e.stratum for e in examples} == {None}
    table = tmp_path / "upload" / "train.jsonl"  # an uploaded table: a `genre` key is not a column it maps
    table.parent.mkdir()
    labels = [1] * 80 + [0] * 20
    table.write_text("".join(json.dumps({"sentence": f"s {i}", "label": y, "genre": "x"}) + "\n"
                             for i, y in enumerate(labels)))  # fmt: skip
    sample = train_examples(_config(table, "sst2", max_train_samples=10), get_task("sst2"))
    assert {e.stratum for e in sample} == {None} and Counter(e.label for e in sample) == {1: 8, 0: 2}


def test_the_data_key_tells_apart_what_picks_the_rows(tmp_path: Path) -> None:
    config = _config(tmp_path, max_train_samples=10)
    assert data_key(config) == data_key(_config(tmp_path, max_train_samples=10, seed=5))
    assert data_key(config) != data_key(_config(tmp_path, max_train_samples=10, sampling="head"))
    assert data_key(config) != data_key(_config(tmp_path, max_train_samples=10, validation_fraction=0.1))


# --- the real GLUE files ------------------------------------------------------------------------------------


@pytest.mark.glue
def test_stsb_1k_spans_every_genre_and_colas_every_source(glue_dir: Path) -> None:
    """GLUE's first 1,000 STS-B pairs are all MSRvid captions; the default sample has every genre in the
    training file's proportions (captions 2000, news 3299, forum 450 of 5,749), as dev has every genre."""
    stsb = get_task("stsb")
    every = load_glue_split(stsb, glue_dir, "train")
    genres = Counter(e.stratum for e in every)
    assert genres == {"main-captions": 2000, "main-news": 3299, "main-forum": 450}
    head = train_examples(
        TrainConfig(task="stsb", data=str(glue_dir), max_train_samples=1000, sampling="head"), stsb
    )
    assert Counter(e.stratum for e in head) == {"main-captions": 1000}
    sample = train_examples(TrainConfig(task="stsb", data=str(glue_dir), max_train_samples=1000), stsb)
    _within_one(Counter(e.stratum for e in sample), dict(genres), 1000)
    dev = Counter(e.stratum for e in load_glue_split(stsb, glue_dir, "dev"))
    assert len(dev) == len(genres) == len(set(Counter(e.stratum for e in sample)))  # every genre, as in dev
    cola = get_task("cola")
    sources = Counter(e.stratum for e in load_glue_split(cola, glue_dir, "train"))
    assert len(sources) == 17
    first = train_examples(
        TrainConfig(task="cola", data=str(glue_dir), max_train_samples=1000, sampling="head"), cola
    )
    assert len({e.stratum for e in first}) == 3
    sample = train_examples(TrainConfig(task="cola", data=str(glue_dir), max_train_samples=1000), cola)
    drawn = Counter(e.stratum for e in sample)
    assert set(drawn) == set(sources)  # all 17 publications, each within ±1 per label stratum of its share
    assert all(abs(drawn[s] - 1000 * n / 8551) <= 2 for s, n in sources.items())
