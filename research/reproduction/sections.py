"""The report's method sections, for one set of trial records (the service's campaign on CPU, or the
direct runs on a lent GPU): best dev score with paired differences to vanilla (t interval and p, Holm
within the task, the exact sign and Wilcoxon p beside them), the same under the old cut schedule, the step
cost, what the regulariser measured, and the plot of dev metric against training time."""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from research.reproduction import plan
from research.reproduction.budget import epoch_seconds, equal_time_epochs, lr_share, updates_per_epoch
from research.reproduction.exact import fmt_exact, smallest_exact_p
from research.reproduction.stats import (
    ALPHA,
    Paired,
    best_within,
    ci,
    epochs_within,
    holm,
    mean_sd,
    paired,
    reading,
)

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "service" / "dashboard" / "paper_results.json"
PAPER_TABLE = {"rte": "table3", "mrpc": "table3", "cola": "table1", "stsb": "table1", "sst2": "table3"}
DIAGNOSTICS = ("task_loss", "r_s", "r_s_control", "delta_linf", "grad_ratio_rs", "ascent_signal", "d_breg")
HEADER = (
    "| method | n | mean ± sd | minus vanilla [95% paired t CI] | t p (Holm) | sign p | Wilcoxon p | reading | paper |",
    "|---|---|---|---|---|---|---|---|---|",
)

Records = list[dict[str, Any]]


def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _by(records: Records, *keys: str) -> dict[tuple[Any, ...], Records]:
    out: dict[tuple[Any, ...], Records] = defaultdict(list)
    for r in records:
        out[tuple(r[k] for k in keys)].append(r)
    return out


def _paper(task: str, method: str, metric: str) -> float | None:
    tables = json.loads(PAPER.read_text())["tables"]
    table = tables[PAPER_TABLE[task]]["rows"]
    row = table.get(method) or tables["table1"]["rows"].get(method) or {}
    value = (row.get(task) or {}).get(metric)
    return None if value is None else float(value)


def _pairs(records: Records, task: str, method: str, value: Any) -> tuple[list[float], list[float]]:
    """(method, vanilla) values of the seeds both have, by `value(record)`; None values drop the seed."""
    mine = {r["seed"]: value(r) for r in records if r["task"] == task and r["method"] == method}
    base = {r["seed"]: value(r) for r in records if r["task"] == task and r["method"] == "vanilla"}
    seeds = sorted(s for s in mine.keys() & base.keys() if mine[s] is not None and base[s] is not None)
    return [mine[s] for s in seeds], [base[s] for s in seeds]


def _family(records: Records, task: str, value: Any) -> dict[str, tuple[Paired, float]]:
    """Each method's paired comparison with vanilla on `task` (by `value(record)`) and its Holm-adjusted
    t p: the task's comparisons are one family."""
    results = {}
    for method in plan.METHOD_LABELS[1:]:
        mine, base = _pairs(records, task, method, value)
        if len(mine) >= 2:
            results[method] = paired(mine, base)
    adjusted = holm([p.p_t for p in results.values()])
    return {m: (p, h) for (m, p), h in zip(results.items(), adjusted, strict=True)}


def _comparison_rows(records: Records, task: str, value: Any) -> list[str]:
    rows = []
    family = _family(records, task, value)
    for method in plan.METHOD_LABELS:
        cell = [value(r) for r in records if r["task"] == task and r["method"] == method]
        cell = [v for v in cell if v is not None]
        if not cell:
            continue
        m, sd = mean_sd(cell)
        diff = "– | – | – | – | –"
        if method in family:
            p, adjusted = family[method]
            diff = (
                f"{p.mean:+.2f} [{p.low:+.2f}, {p.high:+.2f}] | {p.p_t:.3f} ({adjusted:.3f}) | {fmt_exact(p.p_sign)} "
                f"| {fmt_exact(p.p_wilcoxon)} | {reading(p, adjusted)}"
            )
        metric = next(r["metric"] for r in records if r["task"] == task)
        paper_method = "smart" if method in ("smart-renorm", "smart-independent") else method
        rows.append(
            f"| {method} | {len(cell)} | {m:.2f} ± {_fmt(sd)} | {diff} | {_fmt(_paper(task, paper_method, metric), 1)} |"
        )
    return rows


def summary_cell(p: Paired, adjusted: float) -> str:
    """One comparison in words: bold with its interval where Holm's p < ALPHA; "no difference found" with
    the interval the seeds leave open where the t p >= ALPHA; the reading ("lower, not after Holm") between."""
    numbers = f"p {p.p_t:.3f}; Holm {adjusted:.3f}"
    if adjusted < ALPHA:
        return f"**{p.mean:+.2f} [{p.low:+.2f}, {p.high:+.2f}] ({numbers})**"
    if p.p_t >= ALPHA:
        return f"{p.mean:+.2f}: no difference found ({ci(p)}; {numbers})"
    return f"{p.mean:+.2f} [{p.low:+.2f}, {p.high:+.2f}]: {reading(p, adjusted)} ({numbers})"


def summary_rows(records: Records, tasks: list[str]) -> list[str]:
    """Every method minus vanilla at convergence, one column per task: the paired mean difference with its
    t interval and p, and Holm's adjustment within the task (its comparisons with vanilla are one family)."""
    families = {task: _family(records, task, lambda r: r["value"]) for task in tasks}
    rows = ["| method | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    for method in plan.METHOD_LABELS[1:]:
        row = [summary_cell(*families[t][method]) if method in families[t] else "–" for t in tasks]
        rows.append(f"| {method} | " + " | ".join(row) + " |")
    return rows


def exact_floor_note(records: Records, tasks: list[str]) -> list[str]:
    """Where the exact tests cannot reach ALPHA at the seeds compared, a line that says so."""
    ns = sorted({p.n for task in tasks for p, _ in _family(records, task, lambda r: r["value"]).values()})
    short = [n for n in ns if smallest_exact_p(n) > ALPHA]
    if not short:
        return []
    seeds = " or ".join(map(str, short))
    return [
        f"With {seeds} seeds the exact sign and Wilcoxon tests cannot give a two-sided p below "
        f"{fmt_exact(smallest_exact_p(max(short)))} (2 / 2^n: every seed the same way), above {ALPHA}: here they say "
        "how many seeds point one way, and a difference is read from the t-test (Holm-adjusted).",
        "",
    ]


def _budget(records: Records, task: str) -> float | None:
    """Equal compute: the median training seconds of vanilla's full runs on `task`."""
    runs = [r["wall_s"] for r in records if r["task"] == task and r["method"] == "vanilla"]
    return statistics.median(runs) if runs else None


def _cut_note(records: Records, task: str, budget: float) -> list[str]:
    """How far into its schedule each method was scored under the cut, and what the planned equal-time
    arm would train instead (research.reproduction.budget)."""
    cost = epoch_seconds(records, task)
    parts = []
    for method in plan.METHOD_LABELS[1:]:
        runs = [r for r in records if r["task"] == task and r["method"] == method]
        if not runs or not cost.get("vanilla"):
            continue
        planned = int(runs[0].get("planned_epochs") or runs[0]["epochs"])
        done = int(statistics.median(epochs_within(r["epoch_seconds"], budget) for r in runs))
        per_epoch = updates_per_epoch(int(runs[0].get("train_examples", plan.TRAIN_EXAMPLES)),
                                      int(plan.TRAINING["batch_size"]))  # fmt: skip
        share = lr_share(done, planned, per_epoch, float(plan.TRAINING["warmup_fraction"]))
        arm = equal_time_epochs(planned, cost[method] / cost["vanilla"])
        parts.append(f"{method} {done} of {planned} (lr {share:.2f} of peak; equal-time arm: {arm})")
    if not parts:
        return []
    return [
        "Epochs scored inside the budget (median over seeds), the learning rate at the last of them as a "
        "share of its peak, and the epochs the planned equal-time arm would train (its schedule completed; "
        "at this section's step-cost ratio): " + "; ".join(parts) + ".",
        "",
    ]


def _diagnostic_rows(records: Records) -> list[str]:
    rows = []
    for (task, method), runs in sorted(_by(records, "task", "method").items()):
        if not any(runs[0]["components"].get(k) for k in ("r_s", "d_breg")):
            continue
        cells = []
        for key in DIAGNOSTICS:
            values = [v for r in runs for v in r["components"].get(key, [])]
            cells.append(f"{statistics.mean(values):.2e}" if values else "–")
        loss = [v for r in runs for v in r["train_loss"]]
        cells.append(f"{statistics.mean(loss):.3f}" if loss else "–")
        rows.append(f"| {task} | {method} | " + " | ".join(cells) + " |")
    return rows


def methods_sections(records: Records, *, level: str, unit: str, plot_link: str | None) -> list[str]:
    """The markdown of every method section for `records`; `level` is the heading prefix ("##"), `unit`
    says what a training second is (e.g. "1 CPU thread"), `plot_link` the plot's path from docs/."""
    sub = level + "#"
    tasks = [t for t in plan.TASKS if any(r["task"] == t for r in records)]
    out = []
    if tasks:
        out += [
            f"{level} Summary: each method minus vanilla at convergence (paired over seeds)",
            "",
            "The paired t-test over seeds: the mean difference, its 95% interval (df = n − 1) and p, and Holm's",
            "adjustment over the task's comparisons with vanilla (one family per task); bold where the adjusted",
            'p < 0.05. "No difference found" is not equivalence: the interval says how large a difference the',
            "seeds leave possible. The tables below add the exact sign and Wilcoxon signed-rank p.",
            "",
            *summary_rows(records, tasks),
            "",
            *exact_floor_note(records, tasks),
        ]
    out += [f"{level} At convergence: the best dev score of each run", ""]
    if not tasks:
        out += ["_No method has run yet._", ""]
    for task in tasks:
        metric = next(r["metric"] for r in records if r["task"] == task)
        out += [
            f"{sub} {task} (dev {metric}; paper: {PAPER_TABLE[task].replace('table', 'Table ')}, BERT-base, full training set)",
            "",
            *HEADER,
            *_comparison_rows(records, task, lambda r: r["value"]),
            "",
        ]
    out += [
        f"{level} At equal compute, cut schedule (old): the best dev score within vanilla's training time",
        "",
        "Each method's run is cut at vanilla's median training time and scored on the epochs that ended",
        "inside it. Its warm-up and decay were planned over all its epochs, so a method costing 2.4 vanilla",
        "epochs is judged after about 4 of 10, its learning rate near two-thirds of peak and never decayed:",
        "a cut schedule, not the method at equal compute. The planned arms replace it (equal wall time: the",
        "epochs the budget buys, the schedule planned over them; equal updates; `python -m",
        "research.reproduction.budget`); they have not run.",
        "",
    ]
    for task in tasks:
        budget = _budget(records, task)
        if budget is None:
            continue
        out += [
            f"{sub} {task}: budget {budget:.0f} s of training (vanilla's median full run), cut schedule (old)",
            "",
            *HEADER,
            *_comparison_rows(
                records, task, lambda r, b=budget: best_within(r["curve"], r["epoch_seconds"], b)
            ),
            "",
            *_cut_note(records, task, budget),
        ]
    sizes = sorted({int(r.get("train_examples", 1000)) for r in records})
    examples = " or ".join(f"{n:,}" for n in sizes)
    out += [f"{level} Step cost: median training seconds per epoch ({examples} examples, {unit})", ""]
    shared = any("concurrent_trials" in r for r in records)  # a device shared by several trials at once
    extra = ["trials at once"] if shared else []
    columns = [*extra, *plan.METHOD_LABELS]
    out += ["| task | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for task in tasks:
        cost = epoch_seconds(records, task)
        base = cost.get("vanilla")
        cells = [
            f"{cost[m]:.1f} s" + (f" ({cost[m] / base:.2f}x)" if base else "") if m in cost else "–"
            for m in plan.METHOD_LABELS
        ]
        if shared:
            counts = sorted({r.get("concurrent_trials", 1) for r in records if r["task"] == task})
            cells.insert(0, str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}")
        out.append(f"| {task} | " + " | ".join(cells) + " |")
    out += ["", f"{level} What the regulariser measured (per-epoch means over every epoch and seed)", ""]
    out += [
        "| task | method | task loss | R_s | R_s at δ = 0 | ‖δ‖∞ | ‖∇R_s‖ / ‖∇L‖ (head) | ascent signal | D_Breg | train loss |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *_diagnostic_rows(records),
        "",
    ]
    if plot_link:
        out += [
            f"{level} Dev metric against training time",
            "",
            f"![dev metric against training time]({plot_link})",
            "",
        ]
    return out
