"""Issue 28's GPU measurement as one command: a SMART step at bf16 against the exact fp32 one, per shape.

    python -m research.tensor_cores --out step_gpu.json [--models minilm-l6=PATH,bert-base=PATH]
        [--shapes bert-base:512,bert-base:128,minilm-l6:128,minilm-l6:512] [--batch-size 32] [--steps 10]
        [--compile-shapes minilm-l6:128] [--device cuda]

For each shape `smartune bench step --precision bf16` (bench.step.run, in this process) times and measures
`METHODS`: vanilla, the exact fp32 SMART step (the default), the linearised `smart`, `smart-renorm` and `r3f`
(`rs_arithmetic: auto`, `shared`), the teacher alone, and vanilla again under another label (`vanilla@again`:
its ratio to vanilla is the run's noise). Each shape's result goes into OUT as soon as it is measured, so a run
cut short keeps what it finished. `--compile-shapes` then times vanilla, the exact and the linearised step with each
copy's encoder compiled (`compile: true`) at those shapes (issue 28 item 5), under `<shape>+compile`
(`--compile-first`: before the eager shapes); a method that does not survive compilation is recorded with its
error, not a crash. `--methods` narrows METHODS.

The goals it checks (`goals`): SMART ≤ 3.0x vanilla's time and ≤ 2.0x its memory at every shape, the
teacher alone ≤ 1.3x. The lent GPU runs it as `research.lent_gpu run --stages tensor-cores`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

LINEAR = "+rs_arithmetic=auto+rs_dropout=shared"
METHODS = ("vanilla", "smart", f"smart{LINEAR}", f"smart-renorm{LINEAR}", f"r3f{LINEAR}", "smart-breg-only",
           "vanilla@again")  # fmt: skip
# Compiled: vanilla, the exact step (its encoder compiles: 4 variants on CPU, grad mode and frozen weights) and
# the linearised one (it graph-breaks at attention's dropout seed and dynamo runs the layer loop eager: on CPU)
COMPILED = ("vanilla", "smart", f"smart{LINEAR}")
SHAPES = "bert-base:512,bert-base:128,minilm-l6:128,minilm-l6:512"  # the paper's shape first
GOALS = {f"smart{LINEAR}": (3.0, 2.0), "smart-breg-only": (1.3, None)}  # method: (time ratio, memory ratio)


def shapes(spec: str) -> list[tuple[str, int]]:
    """`bert-base:512,minilm-l6:128` -> [("bert-base", 512), ("minilm-l6", 128)]."""
    out = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, sep, length = item.partition(":")
        if not sep or not length.isdigit():
            raise ValueError(f"a shape is MODEL:SEQ_LEN, got {item!r}")
        out.append((name, int(length)))
    return out


def step_args(
    model: str, seq_len: int, methods: tuple[str, ...], args: argparse.Namespace, compile: bool
) -> Any:
    """bench.step.run's arguments: bf16, no padding comparison."""
    return argparse.Namespace(model=model, methods=",".join(methods), rs_dropout="", steps=args.steps,
                              batch_size=args.batch_size, seq_len=seq_len, device=args.device, padding_tasks="",
                              padding_examples=0, precision="bf16", compile=compile)  # fmt: skip


def summary(result: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per method: time and memory ratios to vanilla, MFU and the bf16 share of the matmul FLOPs."""
    keys = ("time_ratio", "mem_ratio", "mfu", "flops_bf16_share", "step_s", "peak_mb")
    return {m: {k: r[k] for k in keys} for m, r in result["methods"].items()}


def goals(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each goal of issue 28 at each measured shape: the ratio and whether it is met."""
    out: dict[str, dict[str, Any]] = {}
    for shape, result in results.items():
        if "+compile" in shape or "methods" not in result:
            continue
        for method, (time_goal, memory_goal) in GOALS.items():
            row = result["methods"].get(method)
            if row is None:
                continue
            entry = {"time_ratio": row["time_ratio"], "time_met": row["time_ratio"] <= time_goal}
            if memory_goal is not None:
                entry |= {"mem_ratio": row["mem_ratio"], "mem_met": row["mem_ratio"] <= memory_goal}
            out[f"{shape} {method}"] = entry
    return out


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "| shape | method | time × vanilla | memory × vanilla | MFU | bf16 share |",
        "|---|---|---|---|---|---|",
    ]
    for shape, result in results.items():
        if "methods" not in result:
            lines.append(f"| {shape} | error: {result.get('error', '?')[:120]} | | | | |")
            continue
        for method, r in summary(result).items():
            lines.append(f"| {shape} | {method} | {r['time_ratio']:.2f} | {r['mem_ratio']:.2f} | "
                         f"{100 * r['mfu']:.1f}% | {100 * r['flops_bf16_share']:.0f}% |")  # fmt: skip
    return "\n".join(lines)


def measure(args: argparse.Namespace, run: Any = None) -> dict[str, Any]:
    """Every shape, then every compiled shape, into `args.out` after each; `run`: bench.step.run (a test's
    fake)."""
    import bench.step

    bench.step.MEMORY_PARALLEL = args.memory_parallel
    run = run or bench.step.run
    paths = dict(item.split("=", 1) for item in args.models.split(",") if "=" in item)
    methods = tuple(m for m in args.methods.split(",") if m) if args.methods else METHODS
    plan = [(name, length, methods, False) for name, length in shapes(args.shapes)]
    compiled_plan = [(name, length, COMPILED, True) for name, length in shapes(args.compile_shapes)]
    plan = compiled_plan + plan if args.compile_first else plan + compiled_plan
    results: dict[str, Any] = {}
    for name, length, methods, compiled in plan:
        label = f"{name}x{length}{'+compile' if compiled else ''}"
        print(f"[tensor_cores] {label}", file=sys.stderr, flush=True)
        try:
            results[label] = run(step_args(paths.get(name, name), length, methods, args, compiled))
        except Exception as err:  # a compiled step that fails is a finding; the other shapes still run
            results[label] = {"error": f"{type(err).__name__}: {err}"[:2000]}
        document = {"shapes": results, "goals": goals(results), "methods": list(methods)}
        args.out.write_text(json.dumps(document, indent=1))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.tensor_cores", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="", help="NAME=PATH,...: where each shape's model is (else NAME)")
    parser.add_argument("--shapes", default=SHAPES, help="MODEL:SEQ_LEN,...")
    parser.add_argument("--compile-shapes", default="", help="MODEL:SEQ_LEN,... also timed compiled")
    parser.add_argument("--compile-first", action="store_true", help="the compiled shapes before the others")
    parser.add_argument("--methods", default="", help="METHOD,... (default: METHODS); vanilla first")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--memory-parallel", type=int, default=2, help="memory children at a time")
    args = parser.parse_args(argv)
    results = measure(args)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
