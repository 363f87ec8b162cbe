"""`smartune submit --estimate`: the plan of a job spec as the server computed it, for a terminal."""

from __future__ import annotations

from typing import Any


def _hours(value: float | None, unit: str) -> str:
    return "unknown" if value is None else f"{value:.3f} {unit}"


def render_estimate(plan: dict[str, Any]) -> None:
    unit = plan["unit"]
    running = plan["concurrency"]["running"]
    print(
        f"{plan['trials']} trials ({plan['cells']} cells x {plan['samples_per_cell']} samples) on {plan['device']}"
    )
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
