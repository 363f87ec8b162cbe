"""Tokenisation and batching for training and evaluation.

* :func:`encode` tokenises examples once, without padding (a pair becomes ``[CLS] a [SEP] b [SEP]``,
  truncated to ``max_seq_length`` word pieces, longest sequence first).
* :func:`length_grouped_batches` builds a training epoch's batches from examples of similar length
  (as Hugging Face's ``LengthGroupedSampler`` does), so dynamic padding wastes little compute;
  :func:`sequential_batches` is the eval order.
* :func:`collate` pads one batch to its longest sequence (or to a fixed length for the padding
  benchmark) and returns tensors ready for a BERT-style model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # transformers is heavy; only the type is needed here
    from transformers import PreTrainedTokenizerBase

    from worker.training.data import Example


@dataclass
class EncodedDataset:
    """Token ids of every example, unpadded; row i of each list belongs to example i."""

    input_ids: list[list[int]]  # N sequences of word-piece ids, special tokens included
    labels: list[int] | list[float]  # N class ids, or N regression targets
    token_type_ids: list[list[int]] | None = None  # segment ids (0 = first text, 1 = second), if any
    is_regression: bool = False  # labels are floats: collate makes a float tensor

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def lengths(self) -> list[int]:
        """Sequence lengths in tokens, special tokens included (what padding is computed from)."""
        return [len(ids) for ids in self.input_ids]


def encode(
    examples: Sequence[Example],
    tokenizer: PreTrainedTokenizerBase,
    max_seq_length: int,
    is_regression: bool | None = None,
) -> EncodedDataset:
    """Tokenise ``examples`` (no padding), truncating each to ``max_seq_length`` tokens.

    Examples with two texts are encoded as a pair (truncation takes from the longer text first).
    ``is_regression`` defaults to whether the labels are floats, as :mod:`worker.training.data` makes them.
    """
    if not examples:
        raise ValueError("no examples to encode")
    arity = {len(example.texts) for example in examples}
    if len(arity) != 1 or not arity <= {1, 2}:
        raise ValueError(f"every example needs the same number of texts, 1 or 2; got {sorted(arity)}")
    if max_seq_length < 2:
        raise ValueError(f"max_seq_length must leave room for the special tokens, got {max_seq_length}")
    first = [example.texts[0] for example in examples]
    second = [example.texts[1] for example in examples] if arity == {2} else None
    encoding = tokenizer(first, second, truncation=True, max_length=max_seq_length, padding=False)
    if is_regression is None:
        is_regression = isinstance(examples[0].label, float)
    labels = [float(e.label) for e in examples] if is_regression else [int(e.label) for e in examples]
    token_type_ids = encoding.get("token_type_ids")  # absent for e.g. RoBERTa tokenizers
    return EncodedDataset(
        input_ids=[list(ids) for ids in encoding["input_ids"]],
        labels=labels,
        token_type_ids=None if token_type_ids is None else [list(ids) for ids in token_type_ids],
        is_regression=is_regression,
    )


def length_grouped_batches(
    lengths: Sequence[int],
    batch_size: int,
    generator: torch.Generator,
    mega_batch_mult: int | None = None,
    longest_first: bool = True,
) -> list[list[int]]:
    """One epoch of batches (lists of example indices) grouping examples of similar length.

    Shuffle all indices with ``generator``, cut them into mega-batches of ``batch_size *
    mega_batch_mult``, sort each mega-batch by length (longest first), cut it into batches and
    shuffle the batch order. ``mega_batch_mult`` defaults to 50, fewer when that would leave fewer than
    four mega-batches (as Hugging Face's ``LengthGroupedSampler``): a set smaller than one mega-batch
    would be sorted whole, and every epoch would train on the same batches, only in another order. With ``longest_first`` the batch holding the longest sequence is moved
    to the front (as Hugging Face does), so an out-of-memory error shows in the first step, not
    hours in. Only the last batch can be smaller than ``batch_size``. Deterministic for a given
    generator state; the generator advances, so successive epochs differ.
    """
    if mega_batch_mult is None:
        mega_batch_mult = max(1, min(50, len(lengths) // max(1, batch_size * 4)))
    if batch_size < 1 or mega_batch_mult < 1:
        raise ValueError(f"batch_size and mega_batch_mult must be >= 1, got {batch_size}, {mega_batch_mult}")
    order = torch.randperm(len(lengths), generator=generator).tolist()
    mega = batch_size * mega_batch_mult  # a multiple of batch_size: only the final batch is short
    batches: list[list[int]] = []
    for start in range(0, len(order), mega):
        # sorted() is stable, so ties keep the shuffled order.
        chunk = sorted(order[start : start + mega], key=lambda i: lengths[i], reverse=True)
        batches.extend(chunk[j : j + batch_size] for j in range(0, len(chunk), batch_size))
    batches = [batches[k] for k in torch.randperm(len(batches), generator=generator).tolist()]
    if longest_first and batches:
        longest = max(range(len(batches)), key=lambda b: lengths[batches[b][0]])  # [0]: sorted desc
        batches[0], batches[longest] = batches[longest], batches[0]
    return batches


def sequential_batches(n: int, batch_size: int) -> list[list[int]]:
    """Indices 0..n-1 in order, cut into batches of ``batch_size`` (the last may be smaller)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return [list(range(start, min(start + batch_size, n))) for start in range(0, n, batch_size)]


def padding_ratio(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """Fraction of the padded token grid that is padding, when each batch pads to its longest."""
    grid = sum(len(batch) * max(lengths[i] for i in batch) for batch in batches if batch)
    real = sum(lengths[i] for batch in batches for i in batch)
    return (grid - real) / grid if grid else 0.0


def collate(
    encoded: EncodedDataset,
    indices: Sequence[int],
    pad_token_id: int,
    pad_to: int | None = None,
    side: str = "right",
) -> dict[str, torch.Tensor]:
    """Pad the examples at ``indices`` to the batch's longest sequence (or ``pad_to``), on the ``side``
    given: right, or left (decoders, whose positions follow the attention mask).

    Returns ``input_ids`` (B, T) long, ``attention_mask`` (B, T) long (1 = real token),
    ``token_type_ids`` (B, T) long when the tokenizer gave them (padding gets segment 0), and
    ``labels`` (B,): long class ids, or float32 regression targets.
    """
    if len(indices) == 0:
        raise ValueError("cannot collate an empty batch")
    sequences = [encoded.input_ids[i] for i in indices]
    longest = max(len(ids) for ids in sequences)
    if pad_to is not None and pad_to < longest:
        raise ValueError(f"pad_to={pad_to} is shorter than the batch's longest sequence ({longest})")
    width = longest if pad_to is None else pad_to  # T

    if side not in ("left", "right"):
        raise ValueError(f"padding side must be left or right, got {side!r}")

    def pad(rows: list[list[int]], value: int) -> torch.Tensor:
        # One tensor from padded Python lists: much faster than filling a tensor row by row.
        if side == "left":
            return torch.tensor([[value] * (width - len(row)) + row for row in rows], dtype=torch.long)
        return torch.tensor([row + [value] * (width - len(row)) for row in rows], dtype=torch.long)

    batch = {
        "input_ids": pad(sequences, pad_token_id),
        "attention_mask": pad([[1] * len(ids) for ids in sequences], 0),
    }
    if encoded.token_type_ids is not None:
        batch["token_type_ids"] = pad([encoded.token_type_ids[i] for i in indices], 0)
    labels = [encoded.labels[i] for i in indices]
    batch["labels"] = torch.tensor(labels, dtype=torch.float32 if encoded.is_regression else torch.long)
    return batch
