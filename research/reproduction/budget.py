"""Equal compute, planned instead of cut: a method's schedule for vanilla's budget.

    python -m research.reproduction.budget [--records research/results/paper_ablation_h200.json]
        [--epochs 10] [--train-examples 1000] [--batch-size 32] [--warmup-fraction 0.1]

The old "at equal compute" tables (`stats.best_within`) cut a method's 10-epoch run at vanilla's wall
time: a method costing 2.4 vanilla epochs per epoch is scored after 4 of its 10 epochs, its learning rate
still about two-thirds of peak and never decayed (`lr_share`). Two arms replace it, each an ordinary trial
whose warm-up and linear decay the trainer plans over the arm's own epochs (`worker/training/session.py`,
`linear_schedule` over epochs x updates per epoch):

- **equal wall time**: vanilla's training seconds (its epochs x its seconds per epoch) divided by the
  method's seconds per epoch, floored, at least 1 epoch (`equal_time_epochs`);
- **equal updates**: as many optimizer updates as vanilla (`equal_updates_epochs`). Every method of this
  campaign makes one update per batch at vanilla's batch size, so this is vanilla's epochs, the methods
  phase as it ran; the arm exists so that a method with another batch or update rule is compared fairly.

`Campaign.budget_spec` (research/reproduction/plan.py) turns an arm into a job spec. Running the arms
needs training time and has not been done; the report's old tables are labelled "cut schedule (old)".
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from research.reproduction.plan import METHOD_LABELS

ARMS = ("equal-time", "equal-updates")
ARM_SEP = "@"  # a report row of an arm: "<method label>@<arm>", e.g. "smart@equal-time"
RECORDS = Path(__file__).resolve().parents[1] / "results" / "paper_ablation_h200.json"


@dataclass(frozen=True)
class ArmPlan:
    """One method's schedule under one arm."""

    method: str  # the report label (plan.METHOD_LABELS)
    arm: str  # one of ARMS
    epochs: int  # planned epochs: warm-up and decay are spread over these
    updates: int  # optimizer updates those epochs make
    seconds: float  # expected training seconds: epochs x the method's seconds per epoch

    @property
    def label(self) -> str:
        return f"{self.method}{ARM_SEP}{self.arm}"


def updates_per_epoch(train_examples: int, batch_size: int) -> int:
    """Optimizer updates per epoch: one per batch, the last one partial (the trainer's ceil)."""
    return -(-train_examples // batch_size)


def equal_time_epochs(vanilla_epochs: int, ratio: float) -> int:
    """Whole epochs of a method costing `ratio` vanilla epochs each that fit in `vanilla_epochs` of vanilla's
    time: floor(vanilla_epochs / ratio) (with a 1e-9 tolerance, so 10 / 2.5 is 4), at least 1."""
    if ratio <= 0 or vanilla_epochs < 1:
        raise ValueError(f"need a positive ratio and at least 1 epoch, got {ratio} and {vanilla_epochs}")
    return max(1, math.floor(vanilla_epochs / ratio + 1e-9))


def equal_updates_epochs(vanilla_epochs: int, vanilla_per_epoch: int, method_per_epoch: int) -> int:
    """Epochs of a method making `method_per_epoch` updates per epoch that come nearest vanilla's
    vanilla_epochs x vanilla_per_epoch updates (at least 1; exact when the two per-epoch counts are equal)."""
    if min(vanilla_epochs, vanilla_per_epoch, method_per_epoch) < 1:
        raise ValueError("epochs and updates per epoch must be at least 1")
    return max(1, round(vanilla_epochs * vanilla_per_epoch / method_per_epoch))


def lr_share(epochs_done: int, planned_epochs: int, per_epoch: int, warmup_fraction: float) -> float:
    """The learning rate of the last update after `epochs_done` of `planned_epochs` epochs, as a share of
    the peak, under the trainer's linear warm-up and decay (worker/training/session.py, `linear_schedule`)."""
    total = planned_epochs * per_epoch
    warmup = int(warmup_fraction * total)
    step = max(0, min(epochs_done * per_epoch, total) - 1)
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def plan_arms(
    method: str,
    *,
    vanilla_epochs: int,
    vanilla_epoch_s: float,
    ratio: float,
    vanilla_per_epoch: int,
    method_per_epoch: int | None = None,
) -> list[ArmPlan]:
    """Both arms for one method: `ratio` is its seconds per epoch over vanilla's (measured), vanilla's budget
    is `vanilla_epochs` x `vanilla_epoch_s`; `method_per_epoch` defaults to vanilla's updates per epoch."""
    per_epoch = method_per_epoch or vanilla_per_epoch
    epoch_s = ratio * vanilla_epoch_s
    time_epochs = equal_time_epochs(vanilla_epochs, ratio)
    update_epochs = equal_updates_epochs(vanilla_epochs, vanilla_per_epoch, per_epoch)
    return [
        ArmPlan(method, "equal-time", time_epochs, time_epochs * per_epoch, time_epochs * epoch_s),
        ArmPlan(method, "equal-updates", update_epochs, update_epochs * per_epoch, update_epochs * epoch_s),
    ]


def epoch_seconds(records: list[dict[str, Any]], task: str) -> dict[str, float]:
    """Median training seconds per epoch by report label, over every epoch and seed of `task`."""
    out: dict[str, list[float]] = {}
    for r in records:
        if r["task"] == task:
            out.setdefault(r["method"], []).extend(r["epoch_seconds"])
    return {method: statistics.median(seconds) for method, seconds in out.items() if seconds}


def plan_task(
    records: list[dict[str, Any]], task: str, *, vanilla_epochs: int, per_epoch: int
) -> list[ArmPlan]:
    """Every method's arms on `task`, from the records' measured seconds per epoch (vanilla's and each
    method's median); [] without vanilla."""
    cost = epoch_seconds(records, task)
    base = cost.get("vanilla")
    if not base:
        return []
    return [
        arm
        for method in METHOD_LABELS[1:]
        if method in cost
        for arm in plan_arms(
            method,
            vanilla_epochs=vanilla_epochs,
            vanilla_epoch_s=base,
            ratio=cost[method] / base,
            vanilla_per_epoch=per_epoch,
        )
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.reproduction.budget", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--records", type=Path, default=RECORDS, help="measured seconds per epoch")
    parser.add_argument("--epochs", type=int, default=10, help="vanilla's planned epochs")
    parser.add_argument("--train-examples", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--warmup-fraction", type=float, default=0.1)
    args = parser.parse_args(argv)
    records = json.loads(args.records.read_text())
    per_epoch = updates_per_epoch(args.train_examples, args.batch_size)
    print(f"vanilla: {args.epochs} epochs x {per_epoch} updates; seconds per epoch from {args.records}")
    # The old cut scored as many epochs as the equal-time arm plans, but mid-schedule: its last column
    # is the learning rate there (the arm instead decays it to 0 over those epochs).
    print(
        "| task | method | cost (x vanilla) | equal time: epochs | equal updates: epochs | cut (old): epochs, lr share |"
    )
    print("|---|---|---|---|---|---|")
    for task in sorted({r["task"] for r in records}):
        cost = epoch_seconds(records, task)
        plans = plan_task(records, task, vanilla_epochs=args.epochs, per_epoch=per_epoch)
        for time_arm, updates_arm in zip(plans[::2], plans[1::2], strict=True):
            ratio = cost[time_arm.method] / cost["vanilla"]
            cut = min(args.epochs, math.floor(args.epochs / ratio + 1e-9))  # what the old cut scored
            share = lr_share(cut, args.epochs, per_epoch, args.warmup_fraction)
            print(
                f"| {task} | {time_arm.method} | {ratio:.2f} | {time_arm.epochs} | {updates_arm.epochs} "
                f"| {cut} of {args.epochs}, {share:.2f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
