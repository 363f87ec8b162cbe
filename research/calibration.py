"""Measured step costs in the control plane's calibration format (service/costs/calibration.json).

`python -m research.calibration --from-step STEP.json` merges a `smartune bench step --json` result: one
entry per plain method preset
(model x method x max_seq_length x device), the per-example cost of one full training update
(`train_s_per_example` = the median step seconds / the batch size; the amortised cost where the method's
diagnostics steps were timed too), and each method's cost ratio to vanilla. Entries already in PATH under
other keys are kept; the same key is replaced. Pure JSON in and out: no torch here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from smart_core.config import METHOD_PRESETS


def device_kind(setup: Mapping[str, Any]) -> str:
    """`cpu`, or the GPU's name (`NVIDIA H100 80GB HBM3`): the calibration's device key."""
    return "cpu" if str(setup["device"]).startswith("cpu") else str(setup["device_name"])


def entries_from_step(
    result: Mapping[str, Any], source: str
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """`bench step`'s result as calibration entries and method ratios (plain presets only: a variant such
    as `smart+rs_dropout=off` is not a method a spec names)."""
    setup = result["setup"]
    batch, seq = int(setup["batch_size"]), int(setup["seq_len"])
    entries, ratios = [], {}
    for method, row in result["methods"].items():
        if method not in METHOD_PRESETS:
            continue
        seconds = float(row.get("amortized_step_s", row["step_s"]))
        ratios[method] = float(row.get("amortized_time_ratio", row["time_ratio"]))
        entries.append(
            {
                "model": setup["model"],
                "method": method,
                "max_seq_length": seq,
                "device": device_kind(setup),
                "threads": int(setup["threads"]),
                "batch_size": batch,
                "train_s_per_example": seconds / batch,
                "source": f"{source}: methods.{method}."
                f"{'amortized_step_s' if 'amortized_step_s' in row else 'step_s'} {seconds:.4f} s / batch {batch} "
                f"at {seq} tokens ({setup.get('batch_source', 'fixed batch')}), {setup['threads']} threads",
            }
        )
    return entries, ratios


def _key(entry: Mapping[str, Any]) -> tuple[str, str, int, str]:
    return (entry["model"], entry["method"], int(entry["max_seq_length"]), entry["device"])


def merge(
    document: dict[str, Any], entries: list[dict[str, Any]], ratios: Mapping[str, float]
) -> dict[str, Any]:
    """`document` (the calibration format) with `entries` replacing the same keys and `ratios` the same
    methods' ratios."""
    fresh = {_key(e): e for e in entries}
    kept = [e for e in document.get("entries", []) if _key(e) not in fresh]
    document["entries"] = sorted([*kept, *fresh.values()], key=_key)
    document["method_ratios"] = {**document.get("method_ratios", {}), **ratios}
    return document


def write_calibration(path: Path, result: Mapping[str, Any], source: str = "smartune bench step") -> int:
    """Merge `bench step`'s result into the calibration file at `path` (created when missing); return how
    many entries were written."""
    document = json.loads(path.read_text()) if path.exists() else {}
    entries, ratios = entries_from_step(result, source)
    path.write_text(json.dumps(merge(document, entries, ratios), indent=2) + "\n")
    return len(entries)


def entries_from_memory(
    result: Mapping[str, Any], precision: str, batch_size: int, names: Mapping[str, str], source: str
) -> list[dict[str, Any]]:
    """`python -m research.memory`'s rows at one precision and batch size as calibration entries (its step
    times are medians of synchronised updates on the GPU it names); `names` maps its model labels to the
    names a spec uses (`bert-base` -> `bert-base-uncased`)."""
    device = str(result["setup"]["device"])
    out = []
    for row in result["rows"]:
        if (
            row["precision"] != precision
            or int(row["batch_size"]) != batch_size
            or row["method"] not in METHOD_PRESETS
        ):
            continue
        seconds = float(row["step_s"])
        out.append(
            {
                "model": names.get(row["model"], row["model"]),
                "method": row["method"],
                "max_seq_length": int(row["seq_len"]),
                "device": device,
                "threads": 0,  # a GPU update: host threads do not set its cost
                "batch_size": batch_size,
                "train_s_per_example": seconds / batch_size,
                "source": f"{source}: {row['model']} {row['method']} step_s {seconds:.4f} s / batch {batch_size} "
                f"at {row['seq_len']} tokens, {precision}, on {device}",
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """Merge measured step times into a calibration table (by default the packaged one): `--from-step
    STEP.json` (`smartune bench step --json`'s output) or `--from-memory RESULT.json [--precision bf16]
    [--batch-size 32]` (`python -m research.memory`'s output on a GPU)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m research.calibration", description=main.__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-step", type=Path, help="`smartune bench step --json`'s result")
    source.add_argument("--from-memory", type=Path, help="`python -m research.memory`'s result")
    parser.add_argument("--precision", default="bf16", help="the GPU default ('auto' trains in bf16 on CUDA)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--name", action="append", default=["bert-base=bert-base-uncased"], help="LABEL=MODEL"
    )
    parser.add_argument(
        "--calibration",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "service/costs/calibration.json",
    )
    args = parser.parse_args(argv)
    if args.from_step is not None:
        written = write_calibration(
            args.calibration, json.loads(args.from_step.read_text()), str(args.from_step)
        )
        print(f"{written} entries from {args.from_step} -> {args.calibration}")
        return 0
    result = json.loads(args.from_memory.read_text())
    names = dict(n.split("=", 1) for n in args.name)
    entries = entries_from_memory(result, args.precision, args.batch_size, names, str(args.from_memory))
    document = json.loads(args.calibration.read_text())
    args.calibration.write_text(json.dumps(merge(document, entries, {}), indent=2) + "\n")
    print(f"{len(entries)} entries from {args.from_memory} -> {args.calibration}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
