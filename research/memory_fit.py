"""`python -m research.memory_fit`: the memory model fitted to `research.memory`'s measurements, written as the
control plane's packaged table (service/costs/memory.json, read by service/costs/memory.py).

Per model x method x precision, the peak above the weights of one training update is modelled as

    peak_mb = fixed_mb + tokens x (per_token_mb + per_token_seq_mb x seq_len),   tokens = batch x seq_len

fitted by least squares over the measured batch sizes and sequence lengths (research.memory runs 2 x 2, so
each fit has one degree of freedom left: the residuals are stated per entry). `fixed_mb` is what does not
grow with the batch (gradients, AdamW's two moments, a momentum teacher's copy: about 3 or 4 x the
weights, less where the peak falls before the gradients exist); `per_token_mb` the activations kept per
token; `per_token_seq_mb` what grows with the square of the length (attention). Pure JSON in and out: no
torch here.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = Path("research/results/memory_h200.json")
DEFAULT_OUT = Path("service/costs/memory.json")

# What the measured labels are (research/lent_gpu.py builds them): the names a spec's `model` may use for
# exactly that model, and the attention heads (research.memory records hidden size and layers, not heads).
KNOWN_MODELS: dict[str, dict[str, Any]] = {
    "minilm-l6": {"names": ["minilm-l6", "sentence-transformers/all-MiniLM-L6-v2"], "heads": 12},
    "bert-base": {"names": ["bert-base-uncased", "google-bert/bert-base-uncased"], "heads": 12},
}


def solve3(a: list[list[float]], b: list[float]) -> list[float]:
    """x of the 3 x 3 system a x = b (Gaussian elimination with partial pivoting)."""
    m = [row[:] + [v] for row, v in zip(a, b, strict=True)]
    for col in range(3):
        pivot = max(range(col, 3), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-300:
            raise ValueError("singular fit: the rows need at least 2 batch sizes and 2 sequence lengths")
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, 3):
            f = m[r][col] / m[col][col]
            m[r] = [x - f * y for x, y in zip(m[r], m[col], strict=True)]
    x = [0.0, 0.0, 0.0]
    for r in (2, 1, 0):
        x[r] = (m[r][3] - sum(m[r][c] * x[c] for c in range(r + 1, 3))) / m[r][r]
    return x


def fit(points: Sequence[tuple[int, int, float]]) -> tuple[float, float, float]:
    """(fixed_mb, per_token_mb, per_token_seq_mb) minimising the squared error over (batch, seq, peak_mb).

    Columns are scaled to unit size before the normal equations (tokens x seq spans 1e3 to 1e7)."""
    rows = [(1.0, float(b * s), float(b * s * s)) for b, s, _ in points]
    scale = [max(abs(r[j]) for r in rows) for j in range(3)]
    x = [[r[j] / scale[j] for j in range(3)] for r in rows]
    y = [p for _, _, p in points]
    ata = [[sum(r[i] * r[j] for r in x) for j in range(3)] for i in range(3)]
    aty = [sum(r[i] * v for r, v in zip(x, y, strict=True)) for i in range(3)]
    coef = solve3(ata, aty)
    fixed, per_token, per_token_seq = (c / s for c, s in zip(coef, scale, strict=True))
    return fixed, per_token, per_token_seq


def predict(entry: Mapping[str, float], batch_size: int, seq_len: int) -> float:
    tokens = batch_size * seq_len
    return entry["fixed_mb"] + tokens * (entry["per_token_mb"] + entry["per_token_seq_mb"] * seq_len)


def entries(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One fitted entry per model x method x precision, with each measured point's residual."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        if row.get("peak_mb") is None:  # a CPU run of research.memory measures time only
            continue
        groups.setdefault((row["model"], row["method"], row["precision"]), []).append(row)
    out = []
    for (model, method, precision), group in sorted(groups.items()):
        points = [(int(r["batch_size"]), int(r["seq_len"]), float(r["peak_mb"])) for r in group]
        if len({b for b, _, _ in points}) < 2 or len({s for _, s, _ in points}) < 2:
            raise ValueError(f"{model} {method} {precision}: needs 2 batch sizes and 2 sequence lengths")
        fixed, per_token, per_token_seq = fit(points)
        entry: dict[str, Any] = {
            "model": model,
            "method": method,
            "precision": precision,
            "fixed_mb": round(fixed, 3),
            "per_token_mb": round(per_token, 6),
            "per_token_seq_mb": round(per_token_seq, 9),
            "weights_mb": round(float(group[0]["weights_mb"]), 3),
        }
        residuals = [
            {"batch_size": b, "seq_len": s, "measured_mb": round(p, 1), "residual_mb": round(p - predict(entry, b, s), 1)}
            for b, s, p in points
        ]  # fmt: skip
        entry["points"] = residuals
        # Measured above the fit: the estimate adds this back, so it never reads below a measured point.
        entry["max_residual_mb"] = round(max(0.0, *(r["residual_mb"] for r in residuals)), 1)
        entry["max_relative_residual"] = round(
            max(abs(r["residual_mb"]) / r["measured_mb"] for r in residuals), 4
        )
        out.append(entry)
    return out


def models(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The measured models' shapes: what an unmeasured model is scaled from."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        known = KNOWN_MODELS.get(row["model"], {})
        out.setdefault(
            row["model"],
            {
                "names": known.get("names", [row["model"]]),
                "params": int(row["params"]),
                "hidden": int(row["hidden"]),
                "layers": int(row["layers"]),
                "heads": int(known.get("heads", max(1, int(row["hidden"]) // 64))),
                "weights_mb": round(float(row["weights_mb"]), 3),
            },
        )
    return out


def document(result: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The packaged table: what it models, where it comes from, the models' shapes and the fits."""
    setup = result.get("setup", {})
    rows = result["rows"]
    return {
        "about": "Peak accelerator memory of one training update, fitted by research/memory_fit.py (docs/"
        "memory_packing.md). peak_mb above the weights = fixed_mb + tokens x (per_token_mb + per_token_seq_mb "
        "x seq_len), tokens = batch_size x seq_len, per model x method x precision, measured with AdamW as "
        "torch.cuda.max_memory_allocated above the weights (research/memory.py). points: each measurement and "
        "its residual (measured - fitted). The control plane adds the weights, max_residual_mb and its "
        "margins (service/costs/memory.py).",
        "source": source,
        "device": setup.get("device"),
        "torch": setup.get("torch"),
        "models": models(rows),
        "entries": entries(rows),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.memory_fit", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("source", nargs="?", type=Path, default=DEFAULT_SOURCE, help="research.memory's JSON")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the table to write ('-': stdout)")
    args = parser.parse_args(argv)
    source = args.source.resolve()
    label = str(source.relative_to(ROOT)) if source.is_relative_to(ROOT) else str(args.source)
    text = json.dumps(document(json.loads(source.read_text()), label), indent=1) + "\n"
    if str(args.out) == "-":
        sys.stdout.write(text)
    else:
        args.out.write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
