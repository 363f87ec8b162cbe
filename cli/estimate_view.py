"""`smartune submit --estimate`: the plan of a job spec as the server computed it, for a terminal."""

from __future__ import annotations

from typing import Any


def _hours(value: float | None, unit: str) -> str:
    return "unknown" if value is None else f"{value:.3f} {unit}"


def _size(n: float) -> str:
    """Bytes in decimal units, three significant digits, as the server's messages write them."""
    for factor, unit in ((10**12, "TB"), (10**9, "GB"), (10**6, "MB"), (10**3, "kB")):
        if abs(n) >= factor:
            return f"{n / factor:.3g} {unit}"
    return f"{n:g} B"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def trial_count(plan: dict[str, Any]) -> str:
    """`4 cells x 2 seeds = 8 trials` (a cell: one configuration of the grid, task included; the plan's
    `cells` count each seed apart), with `x 3 samples` when random search draws several per cell."""
    seeds = plan.get("seeds") or 1  # a server older than the field: seeds unknown, counted as one
    factors = [_count(plan["cells"] // seeds, "cell"), _count(seeds, "seed")]
    if plan["samples_per_cell"] != 1:
        factors.append(_count(plan["samples_per_cell"], "sample"))
    return f"{' x '.join(factors)} = {_count(plan['trials'], 'trial')}"


def render_estimate(plan: dict[str, Any]) -> None:
    unit = plan["unit"]
    running = plan["concurrency"]["running"]
    print(f"{trial_count(plan)} on {plan['device']}")
    for g in plan["groups"]:
        print(f"  {g['trials']} x {g['task']} {g['model']} {g['method']} seq {g['max_seq_length']}: "
              f"{g['epochs']} epochs of {g['train_examples'] if g['train_examples'] is not None else '?'} "
              f"examples ({g['train_examples_basis']}), {g['eval_examples'] or '?'} evaluated")  # fmt: skip
        calibration = g["calibration"]
        if calibration is not None:
            entry = calibration["entry"]
            how = calibration["fallback"] or "exact"
            print(f"    {calibration['train_s_per_example']:.4f} s per example ({how}; entry {entry['model']}/"
                  f"{entry['method']}/{entry['max_seq_length']}/{entry['device']}: {entry['source']})")  # fmt: skip
        if g["unknown"]:
            print(f"    not estimated: {g['unknown']}")
    print(f"device-hours: {_hours(plan['device_hours'], unit)}; wall: {_hours(plan['wall_hours'], 'h')} "
          f"at {running} concurrent trials")  # fmt: skip
    if plan["asha"]:
        asha = plan["asha"]
        print(f"ASHA (expected): {asha['expected_epoch_fraction']:.0%} of the epochs, "
              f"{_hours(asha['expected_device_hours'], unit)}")  # fmt: skip
    budget = plan["budget"]
    if budget["budget"] is not None:
        print(f"budget: {budget['budget']:g} {unit} per {budget['period_days']:g} days; {budget['used']:.3f} used, "
              f"{budget['reserved']:.3f} reserved, {budget['left']:.3f} left")  # fmt: skip
    if not budget["fits"]:
        print(f"a submission would be refused: {budget['refusal']}")
    room = plan.get("storage")  # absent from a server older than the field
    if room is not None:
        quota = "no quota" if room["quota_bytes"] is None else f"quota {_size(room['quota_bytes'])}"
        print(f"storage: {_size(room['used_bytes'])} used ({quota}): datasets {_size(room['datasets_bytes'])}, "
              f"checkpoints {_size(room['checkpoints_bytes'])}, MLflow artifacts {_size(room['artifacts_bytes'])}")  # fmt: skip
        if not room["fits"]:
            print(f"a submission would be refused: {room['refusal']}")
