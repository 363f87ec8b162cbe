"""The paper's reported numbers beside a sweep's, for jobs of a paper preset (`smart-paper-grid`: Table 1;
`smart-ablation`: Table 3). The numbers are data with their citation (paper_results.json, transcribed from
Jiang et al., ACL 2020, the tables in ../shared/reference/paper_tables.md); this module only matches them
to a job: its task, its method (or each method of an ablation's cells) and the task's main metric.

Ours is the best cell's mean over seeds, in percent like the paper. The paper fine-tuned BERT-base on the
full training sets: a sweep of another model or on a fraction of the data is not expected to match, and
the page says which model ran.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from worker.contract.tasks import TASKS

DATA = Path(__file__).with_name("paper_results.json")


@lru_cache(maxsize=1)
def results() -> dict[str, Any]:
    return dict(json.loads(DATA.read_text()))


def beside(spec: dict[str, Any], cells: list[dict[str, Any]]) -> dict[str, Any] | None:
    """`{title, citation, note, model, metric, rows: [{label, method, paper, ours, n}]}` for a job of a paper
    preset on one GLUE task the table reports, else None. `cells` are the job's cells (views._cells)."""
    data = results()
    table_name = data["presets"].get((spec.get("search_space") or {}).get("preset"))
    task = spec.get("task")
    if table_name is None or not isinstance(task, str) or task not in TASKS:
        return None
    metric = TASKS[task].main_metric
    table = data["tables"][table_name]
    swept_methods = {c["params"].get("method") for c in cells} - {None}
    methods = sorted(swept_methods) if swept_methods else [str(spec.get("method", "smart"))]
    rows = []
    for method in methods:
        paper = table["rows"].get(method, {}).get(task, {}).get(metric)
        if paper is None:
            continue
        scored = [c for c in cells if c["mean"] is not None and c["params"].get("method", method) == method]
        best = max(scored, key=lambda c: c["mean"], default=None)
        rows.append(
            {
                "label": table["rows"][method]["label"],
                "method": method,
                "paper": paper,
                "ours": None if best is None else round(100.0 * best["mean"], 2),
                "n": 0 if best is None else best["n"],
            }
        )
    if not rows:
        return None
    return {
        "title": table["title"],
        "citation": data["citation"],
        "note": data["note"],
        "paper_model": data["model"],
        "model": spec.get("model"),
        "task": task,
        "metric": metric,
        "rows": rows,
    }
