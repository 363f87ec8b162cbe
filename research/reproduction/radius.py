"""The radius x λ_s section (issue 29): SMART where its perturbation acts, each cell's ascent checked.

At the paper's ε = 1e-5 R_s is inert (R_s grows as ε², its gradient was 1e-7 of the task loss's), so
"R_s does not help" was shown only for a vanishing perturbation. `plan.RADIUS_METHODS` runs the ball at
ε = 1e-3, 1e-2, 1e-1 with λ_s 0.1, 1 and 10, on the same random subsets and seeds as vanilla and the teacher alone
(`smart-breg-only`, λ_s = 0), and each trial's record says whether its adversary acted (`ascent_check`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from research.reproduction import plan
from research.reproduction.exact import fmt_exact
from research.reproduction.stats import Paired, mean_sd, paired

Records = list[dict[str, Any]]
ON_THE_BALL = 0.9  # ‖δ‖∞ at least this share of ε: the ascent step reached the ball's face
STEP_OVER_NOISE = 1.0  # the ascent step at least as long as the initial noise: δ is not the noise
GEOMETRIC = 0.5  # ascent signal (cosine of g(ν), -g(-ν)) above this: a direction of the model, not noise
HEADER = (
    "| ε | λ_s | n | mean ± sd | minus vanilla [95% paired t CI], p | minus the teacher alone [95% paired t CI], p "
    "| ascent acted | ‖δ‖∞ / ε | R_s | R_s at δ = 0 | ‖∇R_s‖ / ‖∇L‖ |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
)


def _mean(values: Sequence[float] | None) -> float | None:
    finite = [v for v in values or () if v is not None and math.isfinite(v)]
    return statistics.fmean(finite) if finite else None


def ascent_check(record: dict[str, Any], epsilon: float) -> dict[str, Any]:
    """Whether the trial's adversary acted, from its per-epoch component means: δ on the ball's face
    (‖δ‖∞ ≥ 0.9 ε), the ascent step at least the noise's length, the ascent direction geometric where it was
    measured, and R_s above its δ = 0 control. `acted` is all of them; each part is returned too."""
    parts = record.get("components", {})
    linf, step = _mean(parts.get("delta_linf")), _mean(parts.get("step_to_noise"))
    signal, r_s, control = (
        _mean(parts.get("ascent_signal")),
        _mean(parts.get("r_s")),
        _mean(parts.get("r_s_control")),
    )
    checks = {
        "on_the_ball": linf is not None and linf >= ON_THE_BALL * epsilon,
        "step_over_noise": step is not None and step >= STEP_OVER_NOISE,
        "geometric": signal is None or signal >= GEOMETRIC,  # measured every `diagnostics_every` steps
        "above_control": r_s is not None and (control is None or r_s > control),
    }
    ratio = None if linf is None else linf / epsilon
    return {"acted": all(checks.values()), **checks, "linf_over_eps": ratio, "r_s": r_s, "r_s_control": control,
            "grad_ratio_rs": _mean(parts.get("grad_ratio_rs"))}  # fmt: skip


def _values(records: Records, task: str, method: str) -> dict[int, float]:
    return {r["seed"]: r["value"] for r in records if r["task"] == task and r["method"] == method}


def _against(mine: dict[int, float], base: dict[int, float]) -> Paired | None:
    seeds = sorted(mine.keys() & base.keys())
    return paired([mine[s] for s in seeds], [base[s] for s in seeds]) if len(seeds) >= 2 else None


def _diff(p: Paired | None) -> str:
    if p is None:
        return "–"
    return f"{p.mean:+.2f} [{p.low:+.2f}, {p.high:+.2f}], t {p.p_t:.3f}, sign {fmt_exact(p.p_sign)}"


def _sci(value: float | None) -> str:
    return "–" if value is None else f"{value:.1e}"


def task_rows(records: Records, task: str) -> list[str]:
    """One row per (ε, λ_s) cell with records on `task`."""
    vanilla, teacher = _values(records, task, "vanilla"), _values(records, task, "smart-breg-only")
    rows = []
    for method in plan.RADIUS_METHODS:
        cell = [r for r in records if r["task"] == task and r["method"] == method.label]
        if not cell:
            continue
        eps, lam = method.params["epsilon"], method.params["lambda_s"]
        checks = [ascent_check(r, eps) for r in cell]
        mine = {r["seed"]: r["value"] for r in cell}
        m, sd = mean_sd(list(mine.values()))
        rows.append(
            f"| {eps:g} | {lam:g} | {len(cell)} | {m:.2f} ± {'–' if math.isnan(sd) else f'{sd:.2f}'} "
            f"| {_diff(_against(mine, vanilla))} | {_diff(_against(mine, teacher))} "
            f"| {sum(c['acted'] for c in checks)} of {len(checks)} "
            f"| {_sci(_mean([c['linf_over_eps'] for c in checks]))} | {_sci(_mean([c['r_s'] for c in checks]))} "
            f"| {_sci(_mean([c['r_s_control'] for c in checks]))} | {_sci(_mean([c['grad_ratio_rs'] for c in checks]))} |"
        )  # fmt: skip
    return rows


def radius_section(records: Records) -> list[str]:
    """The section's Markdown, task by task (nothing when no radius cell has records)."""
    tasks = sorted({r["task"] for r in records if r["method"] in plan.RADIUS_LABELS})
    if not tasks:
        return []
    lambdas = ", ".join(f"{lam:g}" for lam in plan.RADIUS_LAMBDAS)
    radii = ", ".join(f"{eps:g}" for eps in plan.RADII)
    out = [
        "## SMART at radii where R_s acts (ε x λ_s)",
        "",
        f"The ball at ε ∈ {{{radii}}} with σ = ε and η = 100 ε (the paper's ratios at its ε = 1e-5), λ_s ∈",
        f"{{{lambdas}}}, μ = 1, shared",
        "dropout masks; vanilla and the teacher alone (λ_s = 0) on the same seeds and rows. Each score is dev at",
        "the epoch the validation rows chose. *Ascent acted*: ‖δ‖∞ ≥ 0.9 ε, the ascent step at least the",
        "initial noise's length, the ascent direction geometric (signal ≥ 0.5) and R_s above its δ = 0 control,",
        "all as per-epoch means of the trial (`research.reproduction.radius.ascent_check`).",
        "",
        f"Every seed runs the λ_s sweep at ε = {plan.RADIUS_ACTS:g}, the radius where R_s's gradient is a",
        "measurable share of the task's, and the radius sweep at the paper's λ_s = 1; the other corners are",
        f"screened on seeds {_seeds(plan.RADIUS_SCREEN_SEEDS)} (`plan.radius_seeds`): at ε = 1e-3 R_s is inert, at",
        "ε = 1e-1 the ascent leaves the quadratic regime (STS-B's first two seeds showed both). The cells that",
        f"decide the recommendation run on ten seeds ({_seeds(plan.SEEDS)} and {_seeds(plan.DECIDING_SEEDS)}; the grid's",
        f"{_seeds(plan.GRID_SEEDS)} choose and are not reported): vanilla, the teacher alone and λ_s = 1 at ε =",
        f"{plan.RADIUS_ACTS:g}, the paper's weight at the radius that acts. That rule, not a score, chose the cell",
        "(it was set at stop 57, when this cell also read highest of the SMART cells, on STS-B's first three seeds).",
        "",
    ]
    for task in tasks:
        metric = next(r["metric"] for r in records if r["task"] == task)
        out += [
            f"### {task} ({metric})",
            "",
            *progress(records, task),
            "",
            *HEADER,
            *task_rows(records, task),
            "",
        ]
    return out


def _seeds(seeds: Sequence[int]) -> str:
    """`1-5` for a run of consecutive seeds, else `1, 3`."""
    ordered = sorted(seeds)
    consecutive = len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1))
    return f"{ordered[0]}-{ordered[-1]}" if consecutive else ", ".join(map(str, ordered))


def progress(records: Records, task: str) -> list[str]:
    """How much of the task's grid has run, and its two baselines' scores (the cells' reference)."""
    plan_seeds = {m.label: set(m.seeds or plan.SEEDS) for m in plan.RADIUS_PLAN}
    done = [r for r in records if r["task"] == task and r["method"] in plan_seeds]
    planned_done = sum(r["seed"] in plan_seeds[r["method"]] for r in done)
    seeds = sorted({r["seed"] for r in done})
    deciding, screened = (
        len(set(plan.DECIDING_LABELS) & set(plan.RADIUS_LABELS)),
        sum(m.seeds == plan.RADIUS_SCREEN_SEEDS for m in plan.RADIUS_PLAN),
    )
    swept = len(plan.RADIUS_METHODS) - deciding - screened
    devices = sorted({f"{r.get('device', '?')} ({r.get('precision', '?')})" for r in done})
    extra = len(done) - planned_done
    lines = [f"{planned_done} of {sum(map(len, plan_seeds.values()))} planned trials (the two baselines and "
             f"{deciding} deciding cell on seeds {_seeds(plan.SEEDS)} and {_seeds(plan.DECIDING_SEEDS)}, {swept} cells on seeds "
             f"{_seeds(plan.SEEDS)}, {screened} cells screened on seeds {_seeds(plan.RADIUS_SCREEN_SEEDS)})"
             + (f" and {extra} beyond the plan" if extra else "")
             + f"; seeds run: {', '.join(map(str, seeds))}; ran on {', '.join(devices)}."]  # fmt: skip
    for method, name in (("vanilla", "vanilla"), ("smart-breg-only", "the teacher alone")):
        values = list(_values(records, task, method).values())
        if values:
            m, sd = mean_sd(values)
            spread = "–" if math.isnan(sd) else f"{sd:.2f}"
            lines.append(f"{name.capitalize()}: {m:.2f} ± {spread} (n = {len(values)}).")
    lead = _against(_values(records, task, "smart-breg-only"), _values(records, task, "vanilla"))
    if lead is not None:  # the recommendation's first question: does the teacher alone beat vanilla?
        lines.append(f"The teacher alone minus vanilla, paired over {lead.n} seeds: {_diff(lead)}, "
                     f"Wilcoxon {fmt_exact(lead.p_wilcoxon)}.")  # fmt: skip
    return [" ".join(lines)]
