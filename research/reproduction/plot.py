"""The report's plot: the dev metric (mean over seeds) against training time, one panel per task."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from research.reproduction import plan


def plot(records: list[dict[str, Any]], path: Path, xlabel: str) -> None:
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
    handles: dict[str, Any] = {}  # every method once, whichever panel drew it (a task may lack some methods)
    for ax in axes[0]:
        for line in ax.get_lines():
            handles.setdefault(line.get_label(), line)
    fig.legend(list(handles.values()), list(handles), fontsize=7, loc="lower center", ncol=len(handles))
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
