"""How often a 95% interval over n paired seeds covers the true mean difference: the paired t interval the
report prints (`stats.t_interval`) against the percentile bootstrap it printed before, on the same simulated
samples.

    python -m research.reproduction.coverage [--n 5] [--samples 4000] [--draws 10000] [--seed 0]
    python -m research.reproduction.coverage --json > research/results/coverage_n5.json   # the report's

Each sample is n per-seed differences drawn from N(effect, 1) (neither scale nor location matters to either
interval: both are equivariant; each effect gets its own draws, seed + its index). "p < 0.05" is the share of samples whose test rejects a true null (effect
0): for the bootstrap, its old p (twice the share of resampled means on the other side of 0).
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from research.reproduction.stats import LEVEL, t_interval

EFFECTS = (0.0, 1.0)  # no effect, and one seed-sd


def simulate(n: int, samples: int, effect: float, seed: int) -> np.ndarray:
    """(samples, n) paired differences from N(effect, 1)."""
    return np.random.default_rng(seed).normal(effect, 1.0, size=(samples, n))


def t_coverage(diffs: np.ndarray, effect: float) -> float:
    """The share of rows of `diffs` (samples, n) whose paired t interval holds `effect`."""
    low, high = t_interval(diffs)
    return float(((low <= effect) & (effect <= high)).mean())


def bootstrap(diffs: np.ndarray, draws: int, seed: int = 0, chunk: int = 200) -> tuple[np.ndarray, ...]:
    """The old report's percentile bootstrap for every row of `diffs` (samples, n): (low, high, p), with
    its one resampling of seed 0 shared by all rows, as `paired` drew it for every comparison."""
    n = diffs.shape[1]
    index = np.random.default_rng(seed).integers(0, n, size=(draws, n))
    lows, highs, ps = [], [], []
    for start in range(0, len(diffs), chunk):  # (chunk, draws, n) at a time: 80 MB at the defaults
        means = diffs[start : start + chunk][:, index].mean(axis=2)
        low, high = np.percentile(means, [100 * (1 - LEVEL) / 2, 100 * (1 + LEVEL) / 2], axis=1)
        positive = diffs[start : start + chunk].mean(axis=1) > 0
        other_side = np.where(positive, (means <= 0).mean(axis=1), (means >= 0).mean(axis=1))
        lows.append(low)
        highs.append(high)
        ps.append(np.minimum(1.0, 2 * other_side))
    return np.concatenate(lows), np.concatenate(highs), np.concatenate(ps)


def measure(n: int, samples: int, draws: int, seed: int) -> list[dict[str, float]]:
    """One row per effect: the coverage of both intervals and, at effect 0, how often each rejects."""
    rows = []
    for i, effect in enumerate(EFFECTS):
        diffs = simulate(n, samples, effect, seed + i)  # fresh noise per effect: two independent checks
        low, high = t_interval(diffs)
        b_low, b_high, b_p = bootstrap(diffs, draws)
        row = {
            "effect": effect,
            "t_coverage": float(((low <= effect) & (effect <= high)).mean()),
            "bootstrap_coverage": float(((b_low <= effect) & (effect <= b_high)).mean()),
        }
        if effect == 0.0:
            row["t_rejects"] = float(((low > 0) | (high < 0)).mean())  # the t-test's p < 0.05
            row["bootstrap_p_below_0.05"] = float((b_p < 0.05).mean())
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.reproduction.coverage", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--n", type=int, default=5, help="seeds per comparison")
    parser.add_argument("--samples", type=int, default=4000, help="simulated comparisons per effect")
    parser.add_argument("--draws", type=int, default=10_000, help="bootstrap resamples (the report's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="one JSON document (the report reads it)")
    args = parser.parse_args(argv)
    rows = measure(args.n, args.samples, args.draws, args.seed)
    if args.json:
        setup = {"n": args.n, "samples": args.samples, "draws": args.draws, "seed": args.seed,
                 "distribution": "N(effect, 1)", "level": LEVEL,
                 "command": "python -m research.reproduction.coverage --json"}  # fmt: skip
        print(json.dumps({"setup": setup, "rows": rows}, indent=1))
        return 0
    print(f"n = {args.n}, {args.samples} samples per effect, N(effect, 1), seed {args.seed}")
    print(
        "| true effect (seed sd) | t interval covers | bootstrap covers | t p < 0.05 | bootstrap p < 0.05 |"
    )
    print("|---|---|---|---|---|")
    for row in rows:
        rejects = (
            f"{row['t_rejects']:.3f} | {row['bootstrap_p_below_0.05']:.3f}" if "t_rejects" in row else "– | –"
        )
        print(
            f"| {row['effect']:g} | {row['t_coverage']:.3f} | {row['bootstrap_coverage']:.3f} | {rejects} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
