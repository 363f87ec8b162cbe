"""Turn the campaign's records into docs/reproduction.md and its plot.

    python -m research.reproduction.report [--records research/results/paper_ablation.json]
        [--grid research/results/reproduction_grid.json] [--radius research/results/radius.json]
        [--out docs/reproduction.md]

Every number in the page comes from the records (which `research.reproduction.collect` read from MLflow)
and from the paper's tables (service/dashboard/paper_results.json); the prose that interprets them is
research/reproduction/conclusions.md, included as it is.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from research.reproduction.baseline import baseline_section
from research.reproduction.plot import plot
from research.reproduction.radius import radius_section
from research.reproduction.records import FILE_ORDER, subsets
from research.reproduction.sections import Records, _by, _fmt, methods_sections
from research.reproduction.stats import mean_sd

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "research" / "results"
CONCLUSIONS = Path(__file__).with_name("conclusions.md")
PLOT = ROOT / "docs" / "img" / "reproduction_curves.png"
GPU_PLOT = ROOT / "docs" / "img" / "reproduction_curves_h200.png"
GPU_RECORDS = RESULTS / "paper_ablation_h200.json"
GPU_FULL_RECORDS = RESULTS / "paper_ablation_h200_fulltrain.json"  # the whole training set, not 1,000
COVERAGE = RESULTS / "coverage_n5.json"  # `python -m research.reproduction.coverage --json`
RADIUS_RECORDS = RESULTS / "radius.json"  # repro-v2's radius x lambda_s cells with their baselines


def _link(path: Path) -> str | None:
    return f"img/{path.name}" if path.exists() else None


def grid_section(grid: Records) -> list[str]:
    if not grid:
        return ["_The grid has not run yet._", ""]
    lines = [
        "| task | part | lr | epochs | n | best dev (mean ± sd) | epochs run | training s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (task, part, lr, epochs), runs in sorted(
        _by(grid, "task", "method", "learning_rate", "planned_epochs").items()
    ):
        m, sd = mean_sd([r["value"] for r in runs])
        ran = sum(r["epochs"] for r in runs)
        seconds = sum(r["wall_s"] for r in runs)
        lines.append(
            f"| {task} | {part} | {lr:g} | {epochs} | {len(runs)} | {m:.2f} ± {_fmt(sd)} | {ran} | {seconds:.0f} |"
        )
    lines.append("")
    for (task,), runs in sorted(_by(grid, "task").items()):
        full = [r for r in runs if r["method"] == "grid-full"]
        asha = [r for r in runs if r["method"] == "grid-asha"]
        if not full or not asha:
            continue
        cells = _by(full, "learning_rate", "planned_epochs")
        lr, epochs = max(cells, key=lambda c: statistics.mean(r["value"] for r in cells[c]))
        pick = max(asha, key=lambda r: r["value"])  # what Tune's best trial of the ASHA run is
        saved = 1 - sum(r["wall_s"] for r in asha) / sum(r["wall_s"] for r in full)
        ran, of = sum(r["epochs"] for r in asha), sum(r["epochs"] for r in full)
        same = (pick["learning_rate"], pick["planned_epochs"]) == (lr, epochs)
        lines.append(
            f"- **{task}**: ASHA ran {ran} of the full grid's {of} epochs ({100 * (1 - ran / of):.0f}% fewer; training "
            f"time {100 * saved:.0f}% less). The full grid's best cell (mean over seeds): lr {lr:g} x {epochs} epochs. "
            f"ASHA's best trial: lr {pick['learning_rate']:g} x {pick['planned_epochs']} epochs (seed {pick['seed']}, "
            f"{pick['value']:.2f}); the same cell: **{'yes' if same else 'no'}**."
        )
    lines.append("")
    return lines


def statistics_section(coverage: Path = COVERAGE) -> list[str]:
    """How the comparisons are tested, and how often the interval covers at the seeds the campaign has."""
    lines = [
        "## How the comparisons are tested",
        "",
        "- A comparison pairs each seed's method run with vanilla's run of the same seed (same data order and",
        "  head initialisation). The report's interval is the paired t interval of the mean difference (95%,",
        "  df = n − 1) and its p the paired t-test's; Holm's adjustment applies to these p, one family per task.",
        "  Beside them: the exact two-sided sign test and the exact Wilcoxon signed-rank test (zero differences",
        "  dropped, the null distribution counted over every sign pattern; `research/reproduction/exact.py`).",
        "- With 5 seeds neither exact test can give a p below 0.0625 (2 / 2^5: all five seeds one way), so",
        '  neither can reach 0.05. Earlier versions of this page printed a "bootstrap p 0.000": it said only',
        "  that all five seeds pointed one way.",
        '- A difference not found is not a match: where the interval holds 0 the tables say "no difference',
        '  found" and the interval says how large a difference the seeds leave possible.',
    ]
    if coverage.exists():
        data = json.loads(coverage.read_text())
        setup, rows = data["setup"], {row["effect"]: row for row in data["rows"]}
        null, shifted = rows[0.0], rows[max(rows)]
        lines += [
            f"- Coverage at n = {setup['n']}, measured on {setup['samples']:,} simulated {setup['n']}-seed paired "
            f"samples per effect ({setup['distribution']}, seed {setup['seed']}; `{setup['command']}`, "
            f"`research/results/{coverage.name}`): the t interval covered the true difference in "
            f"{100 * null['t_coverage']:.1f}% of samples with no effect and {100 * shifted['t_coverage']:.1f}% with "
            f"an effect of {shifted['effect']:g} seed-sd; the paired percentile bootstrap ({setup['draws']:,} "
            f"resamples) that this page printed before covered {100 * null['bootstrap_coverage']:.1f}% and "
            f"{100 * shifted['bootstrap_coverage']:.1f}%. With no effect the t-test's p fell below 0.05 in "
            f"{100 * null['t_rejects']:.1f}% of samples, the bootstrap's in "
            f"{100 * null['bootstrap_p_below_0.05']:.1f}%.",
        ]
    return [*lines, ""]


def full_train_section(gpu_full: Records) -> list[str]:
    """The direct GPU runs on each task's whole training set (the paper's setting, with MiniLM)."""
    sizes = sorted({f"{r['task']} {r['train_examples']}" for r in gpu_full})
    return [
        "## On a lent GPU, the full training sets",
        "",
        f"The same direct runs and recipe (lr 5e-05, 10 epochs, batch 32, 128 tokens), on every training example "
        f"({', '.join(sizes)}). Records: `research/results/{GPU_FULL_RECORDS.name}`.",
        "",
        *methods_sections(gpu_full, level="###", unit="one GPU shared by several trials", plot_link=None),
    ]


def _subsets_note(records: Records) -> list[str]:
    """The header's line on how the records chose their training examples (records.FILE_ORDER unless a
    record says otherwise)."""
    kinds = subsets(records)
    if kinds != [FILE_ORDER]:
        return [f"_Training examples (subsets): {'; '.join(kinds)}, as each record says._", ""]
    return [
        f"_Training examples (subsets): {FILE_ORDER}. Every record here trained on the first N rows of its",
        "task's GLUE train file, in file order (N = 1,000, or the whole file where a section says so), not on",
        "a random sample of N: a file sorted by source or label gives a skewed subset._",
        "",
    ]


def render(
    records: Records,
    grid: Records,
    gpu: Records | None = None,
    gpu_full: Records | None = None,
    radius: Records | None = None,
) -> str:
    out = [
        "# Reproduction: SMART and its ablations on small GLUE tasks",
        "",
        "_Generated by `python -m research.reproduction.report` from `research/results/paper_ablation.json` (the",
        "service's campaign), `research/results/paper_ablation_h200.json` and `paper_ablation_h200_fulltrain.json`",
        "(direct runs on a lent GPU), `research/results/reproduction_grid.json` and `research/results/radius.json`",
        "(the radius x λ_s rows, merged from each device's `direct` records); the commands are in §1. Do not",
        "edit by hand: the prose is `research/reproduction/conclusions.md`._",
        "",
        *_subsets_note([*records, *grid, *(gpu or []), *(gpu_full or []), *(radius or [])]),
    ]
    out += CONCLUSIONS.read_text().splitlines() if CONCLUSIONS.exists() else []
    out += ["", *statistics_section(), *baseline_section()]
    out += ["## The grid on vanilla (learning rate x epochs), in full and with ASHA", ""]
    out += grid_section(grid)
    out += ["## On CPU, through the service", ""]
    out += methods_sections(records, level="##", unit="1 CPU thread", plot_link=_link(PLOT))
    if gpu:
        device = gpu[0].get("device", "a GPU")
        out += [
            f"## On a lent GPU ({device}), direct runs",
            "",
            "The same trials (the campaign's job specs expanded by the job-spec contract), trained by the same",
            "`run_training` without Ray and MLflow, which the lent machine lacks: `python -m research.lent_gpu`",
            "(its `reproduce` stage runs `research.reproduction.direct`), fp32 (TF32 off), several trials sharing the",
            "GPU at once (the step-cost table says how many per task), so the seconds below are per trial under",
            "that sharing and compare methods within a task, not tasks. The MiniLM weights were carried",
            "as fp16 and restored to fp32 (each weight rounded once; relative error under 4e-4 per tensor).",
            f"Records: `research/results/{GPU_RECORDS.name}`.",
            "",
        ]
        out += methods_sections(
            gpu, level="###", unit="one GPU shared by several trials", plot_link=_link(GPU_PLOT)
        )
    if gpu_full:
        out += full_train_section(gpu_full)
    out += radius_section(radius or [])
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.reproduction.report", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--records", type=Path, default=RESULTS / "paper_ablation.json")
    parser.add_argument("--grid", type=Path, default=RESULTS / "reproduction_grid.json")
    parser.add_argument("--gpu-records", type=Path, default=GPU_RECORDS)
    parser.add_argument("--gpu-full-records", type=Path, default=GPU_FULL_RECORDS)
    parser.add_argument("--radius", type=Path, default=RADIUS_RECORDS)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "reproduction.md")
    args = parser.parse_args(argv)
    records = json.loads(args.records.read_text()) if args.records.exists() else []
    grid = json.loads(args.grid.read_text()) if args.grid.exists() else []
    gpu = json.loads(args.gpu_records.read_text()) if args.gpu_records.exists() else []
    gpu_full = json.loads(args.gpu_full_records.read_text()) if args.gpu_full_records.exists() else []
    plot(records, PLOT, "training minutes (1 CPU thread)")
    plot(gpu, GPU_PLOT, "training minutes (one GPU shared by several trials)")
    radius = json.loads(args.radius.read_text()) if args.radius.exists() else []
    args.out.write_text(render(records, grid, gpu, gpu_full, radius))
    print(
        f"{len(records)} records, {len(grid)} grid records, {len(gpu)} + {len(gpu_full)} GPU records -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
