"""smartune's vanilla against an independent plain Hugging Face loop, paired by seed: the report's first
section (`research/results/baseline_stsb1k.json`, measured with `research/plain_loop.py`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from research.reproduction.exact import fmt_exact
from research.reproduction.records import FILE_ORDER
from research.reproduction.stats import Paired, ci, mean_sd, paired, reading

RESULTS = Path(__file__).resolve().parents[1] / "results"

BASELINE = RESULTS / "baseline_stsb1k.json"
BASELINE_VARIANTS = {
    "nogroup": "smartune, no length grouping (the campaign's setting)",
    "new": "smartune, length grouping (mega-batches of a quarter of the set)",
    "old": "smartune, length grouping (mega-batches of 50 x batch)",
}


def _best(data: dict[str, Any], variant: str) -> dict[int, float]:
    """Best dev Pearson (0-100) by seed of one variant."""
    return {r["seed"]: 100 * r["best"] for r in data["variants"][variant]["runs"]}


def _cells(p: Paired) -> str:
    """The comparison's table cells: difference [t interval] | t p | sign p | Wilcoxon p | reading."""
    return (
        f"{p.mean:+.2f} [{p.low:+.2f}, {p.high:+.2f}] | {p.p_t:.2f} | {fmt_exact(p.p_sign)} | {fmt_exact(p.p_wilcoxon)} "
        f"| {reading(p)}"
    )


def baseline_section() -> list[str]:
    """`smartune train --method vanilla` against an independent plain Hugging Face loop, paired by seed,
    and length grouping on against off."""
    if not BASELINE.exists():
        return []
    data = json.loads(BASELINE.read_text())
    plain = _best(data, "plain")
    plain_mean, plain_sd = mean_sd(list(plain.values()))
    setup = data["setup"]
    lines = [
        "## A strong vanilla first: smartune against a plain Hugging Face loop",
        "",
        f"STS-B, the first {setup['train_examples']} training examples, the full dev set, {setup['model']}, "
        f"batch {setup['batch_size']}, lr {setup['lr']:g}, {setup['epochs']} epochs, seeds "
        f"{', '.join(map(str, setup['seeds']))}; best dev Pearson. Commands: `{data['commands']['plain']}` and "
        f"`{data['commands']['new']}` (file `research/results/baseline_stsb1k.json`; training examples: "
        f"{setup.get('subsets', FILE_ORDER)}).",
        "",
        "| variant | n | mean ± sd | minus plain loop [95% paired t CI] | t p | sign p | Wilcoxon p | reading |",
        "|---|---|---|---|---|---|---|---|",
        f"| plain Hugging Face loop (`research/plain_loop.py`) | {len(plain)} | {plain_mean:.2f} ± {plain_sd:.2f} "
        "| – | – | – | – | – |",
    ]
    for key, label in BASELINE_VARIANTS.items():
        ours = _best(data, key)
        seeds = sorted(ours.keys() & plain.keys())
        p = paired([ours[s] for s in seeds], [plain[s] for s in seeds])
        m, sd = mean_sd([ours[s] for s in seeds])
        lines.append(f"| {label} | {len(seeds)} | {m:.2f} ± {sd:.2f} | {_cells(p)} |")
    on, off = _best(data, "new"), _best(data, "nogroup")
    seeds = sorted(on.keys() & off.keys())
    p = paired([on[s] for s in seeds], [off[s] for s in seeds])
    lines += [
        "",
        f"Length grouping on minus off (smartune, the same seeds {', '.join(map(str, seeds))}): "
        f"{p.mean:+.2f}, {reading(p)} ({ci(p)}; t p = {p.p_t:.2f}, sign p = {fmt_exact(p.p_sign)}, Wilcoxon p = "
        f"{fmt_exact(p.p_wilcoxon)}).",
        "",
        '"No difference found" is not a match: a t interval that holds 0 leaves every difference inside it',
        "possible; showing equivalence takes a margin set in advance and an interval inside it.",
    ]
    return [*lines, ""]
