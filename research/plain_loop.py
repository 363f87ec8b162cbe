"""A plain Hugging Face fine-tuning loop, independent of smartune's training code: the baseline that
`smartune train --method vanilla` should match (issue 12). Shuffled batches padded per batch
(`DataCollatorWithPadding`), AdamW, linear warm-up and decay, gradient clipping, dev metric per epoch.

`python -m research.plain_loop --task stsb --max-train-samples 1000 --epochs 10 --seed 1 --json`
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import torch
from torch.utils.data import DataLoader
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    get_linear_schedule_with_warmup,
)

from worker.contract.sources import glue_dir
from worker.contract.tasks import get_task
from worker.training.data import load_examples
from worker.training.metrics import compute_metrics
from worker.training.models import describe_model
from worker.training.sampling import select_rows, strata


def _rows(examples: list[Any], tokenizer: Any, max_len: int, regression: bool) -> list[dict[str, Any]]:
    rows = []
    for example in examples:
        encoded = tokenizer(*example.texts, truncation=True, max_length=max_len)
        encoded["labels"] = float(example.label) if regression else int(example.label)
        rows.append(dict(encoded))
    return rows


def train(args: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    task = get_task(args.task)
    source = str(glue_dir())
    every_row = load_examples(task, source, task.train_split, None)
    # The same rows as the project's loop picks for `max_train_samples` (stratified random by default,
    # `--sampling head` for file order), so the two loops are compared on one subset.
    keep = select_rows(strata(every_row, task.is_regression), args.max_train_samples, args.fraction_seed,
                       args.sampling)  # fmt: skip
    train_examples = [every_row[i] for i in keep]
    dev_examples = load_examples(task, source, task.eval_splits[0], None)
    path = describe_model(args.model)["path"]
    tokenizer = AutoTokenizer.from_pretrained(path)
    labels = 1 if task.is_regression else task.num_labels
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=labels)
    collate = DataCollatorWithPadding(tokenizer)
    generator = torch.Generator().manual_seed(args.seed)
    loader: DataLoader[dict[str, Any]] = DataLoader(
        _rows(train_examples, tokenizer, args.max_seq_length, task.is_regression),  # type: ignore[arg-type]  # a list is a map-style dataset
        batch_size=args.batch_size, shuffle=True, collate_fn=collate, generator=generator,
    )  # fmt: skip
    dev: DataLoader[dict[str, Any]] = DataLoader(
        _rows(dev_examples, tokenizer, args.max_seq_length, task.is_regression),  # type: ignore[arg-type]  # as above
        batch_size=64, collate_fn=collate,
    )  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    total = len(loader) * args.epochs
    schedule = get_linear_schedule_with_warmup(optimizer, int(0.1 * total), total)  # type: ignore[no-untyped-call]
    epochs: list[dict[str, Any]] = []
    for epoch in range(1, args.epochs + 1):
        model.train()
        started = time.perf_counter()
        for batch in loader:
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
        model.eval()
        predictions, gold = [], []
        with torch.no_grad():
            for batch in dev:
                gold.append(batch.pop("labels"))
                logits = model(**batch).logits
                predictions.append(logits.squeeze(-1) if task.is_regression else logits.argmax(-1))
        metrics = compute_metrics(task, torch.cat(predictions).numpy(), torch.cat(gold).numpy())
        epochs.append({"epoch": epoch, "metrics": metrics, "train_seconds": time.perf_counter() - started})
    main = task.main_metric
    return {
        "task": args.task, "seed": args.seed, "main_metric": main, "epochs": epochs,
        "best": max(e["metrics"][main] for e in epochs), "last": epochs[-1]["metrics"][main],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.plain_loop", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--task", default="stsb")
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--max-train-samples", type=int, default=1000)
    parser.add_argument("--sampling", choices=("random", "head"), default="random",
                        help="which rows: stratified random (the job spec's default) or the first N")  # fmt: skip
    parser.add_argument(
        "--fraction-seed", type=int, default=13, help="the subset's seed (the paper preset's)"
    )
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if glue_dir() is None:
        print("set SMARTUNE_GLUE_DIR to a folder of GLUE data", file=sys.stderr)
        return 2
    result = train(args)
    print(
        json.dumps(result)
        if args.json
        else f"{args.task} seed {args.seed}: best {result['best']:.4f}, last {result['last']:.4f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
