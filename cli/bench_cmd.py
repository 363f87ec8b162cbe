"""`smartune bench ...`: benchmarks (not tests). `bench step` times one training step per method."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks: step time and memory per method, padding")
    kinds = p.add_subparsers(dest="bench", required=True, metavar="BENCH")
    step = kinds.add_parser(
        "step", help="time and memory of one training step per method, vs vanilla and smart-pytorch"
    )
    step.add_argument("--model", default="minilm-l6")
    step.add_argument(
        "--methods", default="vanilla,smart,smart-renorm,smart-rs-only,smart-breg-only,r3f,freelb"
    )
    step.add_argument("--batch-size", type=int, default=16)
    step.add_argument("--seq-len", type=int, default=64)
    step.add_argument("--steps", type=int, default=10, help="timed steps per method (after warm-up)")
    step.add_argument(
        "--device", default="cpu", help="cpu or cuda (falls back to cpu when no GPU is visible)"
    )
    step.add_argument(
        "--padding-tasks", default="rte,mrpc,cola", help="tasks of the padding comparison ('' skips it)"
    )
    step.add_argument("--json", action="store_true", help="print one JSON object")
    step.set_defaults(handler=run_step)


def run_step(args: argparse.Namespace) -> int:
    from bench.step import main

    return main(args)
