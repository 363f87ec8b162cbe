"""The report's method sections, for one set of trial records (the service's campaign on CPU, or the
direct runs on a lent GPU): best dev score with paired differences to vanilla, the same at equal compute,
the step cost, what the regulariser measured, and the plot of dev metric against training time."""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from research.reproduction import plan
from research.reproduction.stats import best_within, holm, mean_sd, paired

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "service" / "dashboard" / "paper_results.json"
PAPER_TABLE = {"rte": "table3", "mrpc": "table3", "cola": "table1", "stsb": "table1", "sst2": "table3"}
DIAGNOSTICS = ("task_loss", "r_s", "r_s_control", "delta_linf", "grad_ratio_rs", "ascent_signal", "d_breg")
HEADER = (
    "| method | seeds | mean ± sd | minus vanilla [95% paired bootstrap] | paired t p | bootstrap p | paper |",
    "|---|---|---|---|---|---|---|",
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


def _comparison_rows(records: Records, task: str, value: Any) -> list[str]:
    rows = []
    for method in plan.METHOD_LABELS:
        cell = [value(r) for r in records if r["task"] == task and r["method"] == method]
        cell = [v for v in cell if v is not None]
        if not cell:
            continue
        m, sd = mean_sd(cell)
        diff = "–"
        if method != "vanilla":
            mine, base = _pairs(records, task, method, value)
            if len(mine) >= 2:
                p = paired(mine, base)
                diff = f"{p.mean:+.2f} [{p.low:+.2f}, {p.high:+.2f}] | {p.p_t:.3f} | {p.p_bootstrap:.3f}"
            else:
                diff = "– | – | –"
        else:
            diff = "– | – | –"
        metric = next(r["metric"] for r in records if r["task"] == task)
        paper_method = "smart" if method in ("smart-renorm", "smart-independent") else method
        rows.append(
            f"| {method} | {len(cell)} | {m:.2f} ± {_fmt(sd)} | {diff} | {_fmt(_paper(task, paper_method, metric), 1)} |"
        )
    return rows


def summary_rows(records: Records, tasks: list[str]) -> list[str]:
    """Every method minus vanilla at convergence, one column per task: the paired mean difference with its
    paired t p, and Holm's adjustment within the task (its comparisons with vanilla are one family)."""
    cells: dict[tuple[str, str], tuple[float, float]] = {}
    adjusted: dict[tuple[str, str], float] = {}
    for task in tasks:
        family = []
        for method in plan.METHOD_LABELS[1:]:
            mine, base = _pairs(records, task, method, lambda r: r["value"])
            if len(mine) >= 2:
                p = paired(mine, base)
                cells[(method, task)] = (p.mean, p.p_t)
                family.append((method, task))
        adjusted |= dict(zip(family, holm([cells[k][1] for k in family]), strict=True))
    rows = ["| method | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    for method in plan.METHOD_LABELS[1:]:
        row = []
        for task in tasks:
            if (method, task) not in cells:
                row.append("–")
                continue
            diff, p_t = cells[(method, task)]
            text = f"{diff:+.2f} (p {p_t:.3f}; Holm {adjusted[(method, task)]:.3f})"
            row.append(f"**{text}**" if adjusted[(method, task)] < 0.05 else text)
        rows.append(f"| {method} | " + " | ".join(row) + " |")
    return rows


def _budget(records: Records, task: str) -> float | None:
    """Equal compute: the median training seconds of vanilla's full runs on `task`."""
    runs = [r["wall_s"] for r in records if r["task"] == task and r["method"] == "vanilla"]
    return statistics.median(runs) if runs else None


def _step_cost(records: Records, task: str) -> dict[str, float]:
    """Median seconds per training epoch by method."""
    out = {}
    for method in plan.METHOD_LABELS:
        seconds = [
            s for r in records if r["task"] == task and r["method"] == method for s in r["epoch_seconds"]
        ]
        if seconds:
            out[method] = statistics.median(seconds)
    return out


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


def plot(records: Records, path: Path, xlabel: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in plan.TASKS if any(r["task"] == t for r in records)]
    if not tasks:
        path.unlink(missing_ok=True)  # no stale plot beside a page that has no records
        return
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        for method in plan.METHOD_LABELS:
            runs = [r for r in records if r["task"] == task and r["method"] == method]
            if not runs:
                continue
            length = min(len(r["curve"]) for r in runs)
            xs, ys, elapsed = [], [], 0.0
            for e in range(length):
                elapsed += statistics.median(r["epoch_seconds"][e] for r in runs)
                xs.append(elapsed / 60)
                ys.append(statistics.mean(r["curve"][e] for r in runs))
            ax.plot(xs, ys, marker="o", markersize=2.5, label=method)
        metric = next(r["metric"] for r in records if r["task"] == task)
        ax.set_title(f"{task} (1k train), dev {metric}")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("dev metric, mean over seeds")
    handles = {}  # every method once, whichever panel drew it (a task may lack some methods)
    for ax in axes[0]:
        for line in ax.get_lines():
            handles.setdefault(line.get_label(), line)
    fig.legend(list(handles.values()), list(handles), fontsize=7, loc="lower center", ncol=len(handles))
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
            "Paired t-test p per cell, and Holm's adjustment over the task's comparisons with vanilla (one",
            "family per task); bold where the adjusted p < 0.05.",
            "",
            *summary_rows(records, tasks),
            "",
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
    out += [f"{level} At equal compute: the best dev score within vanilla's training time", ""]
    for task in tasks:
        budget = _budget(records, task)
        if budget is None:
            continue
        out += [
            f"{sub} {task}: budget {budget:.0f} s of training (vanilla's median full run)",
            "",
            *HEADER,
            *_comparison_rows(
                records, task, lambda r, b=budget: best_within(r["curve"], r["epoch_seconds"], b)
            ),
            "",
        ]
    sizes = sorted({int(r.get("train_examples", 1000)) for r in records})
    examples = " or ".join(f"{n:,}" for n in sizes)
    out += [f"{level} Step cost: median training seconds per epoch ({examples} examples, {unit})", ""]
    shared = any("concurrent_trials" in r for r in records)  # a device shared by several trials at once
    extra = ["trials at once"] if shared else []
    columns = [*extra, *plan.METHOD_LABELS]
    out += ["| task | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for task in tasks:
        cost = _step_cost(records, task)
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
