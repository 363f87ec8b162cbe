"""The data side of the step benchmark: the fixed batch it times, and the dynamic-padding comparison.

`padding_benchmark` times full vanilla training updates over a fixed subset of a GLUE task's training set
(the first `examples` rows, truncated at 128 tokens), with the SAME batches (index lists) collated two ways:
(a) dynamic padding (`length_grouped_batches` + `collate`: each batch padded to its longest example) and
(b) every batch padded to 128 (`collate(..., pad_to=128)`). The two are interleaved batch by batch, with
the order alternating, so drift in machine speed hits both alike; an update during which other work
used the CPUs is timed again (up to RETRIES times, see bench.timed). Collation and the host-to-device copy
are inside the timed region (they are part of what padding costs). speedup = grouped / pad128 examples/s.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bench import CONTENTION_LIMIT, timed
from worker.contract.tasks import get_task
from worker.training.batching import EncodedDataset, collate, encode, length_grouped_batches, padding_ratio
from worker.training.data import load_examples

Batch = dict[str, Tensor]
StepFn = Callable[[Batch, Tensor], None]  # one full training update on (model inputs, labels)
MakeStep = Callable[[int], StepFn]  # num_labels -> a fresh vanilla stepper's step function

ROOT = Path(__file__).resolve().parents[1]
MAX_LEN = 128  # the fixed padding length of variant (b), and the truncation length of both
RETRIES = 3  # re-timings of an update whose sample was contended (other work on the CPUs)
_SYNTHETIC_SEED = 1234


def glue_root() -> Path | None:
    """$SMARTUNE_GLUE_DIR, else the shared offline copy (../shared/data/glue) when it exists, else None."""
    value = os.environ.get("SMARTUNE_GLUE_DIR", "").strip()
    if value:
        return Path(value).expanduser()
    shared = ROOT.parent / "shared" / "data" / "glue"
    return shared if shared.is_dir() else None


def _task_file(name: str, root: Path | None) -> tuple[Any, str | None]:
    """(TaskSpec, None) when the task's GLUE train file exists, else (TaskSpec or None, why not)."""
    try:
        task = get_task(name)
    except ValueError as err:
        return None, str(err)
    if root is None:
        return task, "no GLUE data: SMARTUNE_GLUE_DIR is unset and ../shared/data/glue does not exist"
    path = root / (task.glue_dir or name) / f"{task.train_split}.tsv"
    if not path.is_file():
        return task, f"{path} not found"
    if task.is_regression:
        return task, "regression task: the padding benchmark uses classification heads"
    return task, None


def fixed_batch(tokenizer: Any, batch_size: int, seq_len: int) -> tuple[Batch, Tensor, str]:
    """(inputs, labels, source): a batch of exactly `seq_len` tokens per row, on CPU.

    Real RTE training pairs truncated to `seq_len` when the GLUE copy is present (rows already as long as
    `seq_len` first, so normally no padding at all); otherwise seeded random word-piece ids framed by
    [CLS] ... [SEP] with a full attention mask. Deterministic, so memory children rebuild the same batch.
    """
    root = glue_root()
    task, why_not = _task_file("rte", root)
    if why_not is None and root is not None:
        examples = load_examples(task, root, task.train_split)[: max(8 * batch_size, 256)]
        encoded = encode(examples, tokenizer, seq_len, task.is_regression)
        full = [i for i, n in enumerate(encoded.lengths) if n == seq_len]
        rest = [i for i, n in enumerate(encoded.lengths) if n < seq_len]
        indices = (full + rest)[:batch_size]
        if len(indices) == batch_size:
            batch = collate(encoded, indices, int(tokenizer.pad_token_id or 0), pad_to=seq_len)
            labels = batch.pop("labels")
            pad = 1.0 - float(batch["attention_mask"].float().mean())
            return (
                batch,
                labels,
                f"RTE train, {len(full)} of the first rows at {seq_len} tokens, padding {pad:.1%}",
            )
        why_not = f"RTE has fewer than {batch_size} examples"
    gen = torch.Generator().manual_seed(_SYNTHETIC_SEED)
    ids = torch.randint(1000, len(tokenizer), (batch_size, seq_len), generator=gen)
    ids[:, 0], ids[:, -1] = int(tokenizer.cls_token_id), int(tokenizer.sep_token_id)
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": torch.zeros_like(ids),
    }
    labels = torch.arange(batch_size) % 2
    return batch, labels, f"synthetic random word pieces ({why_not})"


def _timed_update(
    step: StepFn,
    encoded: EncodedDataset,
    indices: list[int],
    pad_id: int,
    pad_to: int | None,
    device: torch.device,
) -> tuple[float, bool]:
    """(seconds for collate + copy + one update, clean): retried up to RETRIES times while contended."""

    def update() -> None:
        batch = {
            k: v.to(device, non_blocking=True) for k, v in collate(encoded, indices, pad_id, pad_to).items()
        }
        labels = batch.pop("labels")
        step(batch, labels)

    for _ in range(RETRIES + 1):
        seconds, foreign = timed(update, device)
        if foreign <= CONTENTION_LIMIT:
            return seconds, True
    return seconds, False


def padding_benchmark(
    tasks: list[str],
    tokenizer: Any,
    make_step: MakeStep,
    device: torch.device,
    *,
    examples: int = 256,
    batch_size: int = 16,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """Per task: examples/s of vanilla training with dynamic padding vs padding to 128, and the speedup.

    A task whose data is missing gets {"skipped": reason}. One vanilla stepper (own model copy and
    optimiser) per task serves both variants: a vanilla step's cost does not depend on the weight values,
    and sharing it keeps the two variants on identical weights.
    """
    results: dict[str, dict[str, Any]] = {}
    for name in tasks:
        root = glue_root()
        task, why_not = _task_file(name, root)
        if why_not is not None or root is None:
            results[name] = {"skipped": why_not}
            print(f"[padding] {name}: skipped ({why_not})", file=sys.stderr)
            continue
        pad_id = int(tokenizer.pad_token_id or 0)
        rows = load_examples(task, root, task.train_split)[:examples]
        encoded = encode(rows, tokenizer, MAX_LEN, task.is_regression)
        batches = length_grouped_batches(encoded.lengths, batch_size, torch.Generator().manual_seed(seed))
        step = make_step(task.num_labels)

        # Warm-up: the longest batch once per variant (allocator, kernels, lazy AdamW state).
        variants: dict[str, int | None] = {"grouped": None, "pad128": MAX_LEN}  # collate's pad_to
        for pad_to in variants.values():
            _timed_update(step, encoded, batches[0], pad_id, pad_to, device)
        totals = dict.fromkeys(variants, 0.0)
        contended = 0
        for k, b in enumerate(batches):
            order = list(variants) if k % 2 == 0 else list(variants)[::-1]
            for variant in order:
                seconds, clean = _timed_update(step, encoded, b, pad_id, variants[variant], device)
                totals[variant] += seconds
                contended += not clean
        n = len(encoded)
        lengths = encoded.lengths
        results[name] = {
            "examples": n,
            "batches": len(batches),
            "mean_tokens": round(sum(lengths) / n, 1),
            "truncated_at_128": sum(1 for x in lengths if x >= MAX_LEN),
            "grouped_padding_fraction": round(padding_ratio(lengths, batches), 4),
            "pad128_padding_fraction": round(1.0 - sum(lengths) / (n * MAX_LEN), 4),
            "grouped_examples_per_s": n / totals["grouped"],
            "pad128_examples_per_s": n / totals["pad128"],
            "speedup": totals["pad128"] / totals["grouped"],
            "contended_updates": contended,  # still contended after RETRIES retries (of 2 x batches)
        }
        print(f"[padding] {name}: speedup {results[name]['speedup']:.2f}x", file=sys.stderr)
    return results
