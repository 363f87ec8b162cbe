"""`python -m research.attention_cost`: the linearised step's time with smart_core.attention against SDPA's math backend.

smart_core.attention keeps no (B, heads, T, T) tensor and recomputes the scores in the backward (docs/
architecture.md §4); SDPA's math backend, which the linearised step used before, keeps them. This times one
full update of `smart+rs_arithmetic=auto+rs_dropout=shared` under bf16 autocast each way, and vanilla, in
interleaved rounds on the same batch (bench.stepper, bench.padding.fixed_batch), and prints the medians and
their ratios as JSON. Time only: `python -m bench.live_memory` counts the memory.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import time
from collections.abc import Callable, Iterator

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import smart_core.linearized
import smart_core.objective
from bench.padding import fixed_batch
from bench.stepper import Stepper, load_model
from smart_core.attention import LightAttention

LINEARISED = "smart+rs_arithmetic=auto+rs_dropout=shared"


@contextlib.contextmanager
def math_attention() -> Iterator[None]:
    """SDPA's math backend at the inputs' precision, as the linearised step ran attention before."""
    reduced = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()  # type: ignore[no-untyped-call]
    torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
    try:
        with sdpa_kernel([SDPBackend.MATH]):
            yield
    finally:
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(reduced)


_RUNS_COMPILED = smart_core.objective.runs_compiled


def _use(attention: Callable[[], contextlib.AbstractContextManager[None]]) -> None:
    for module in (smart_core.objective, smart_core.linearized):  # the names the step's code looks up
        vars(module)["LightAttention"] = attention
    # The math backend's softmax breaks a reverse pass through a dual tensor's tangent (smart_core/softmax.py),
    # so its arm takes the functorch transform, as a compiled model does.
    math = attention is not LightAttention
    vars(smart_core.objective)["runs_compiled"] = (lambda module: True) if math else _RUNS_COMPILED


def measure(model_name: str, batch_size: int, seq_len: int, rounds: int) -> dict[str, object]:
    model, tokenizer = load_model(model_name)
    batch, labels, source = fixed_batch(tokenizer, batch_size, seq_len)
    arms: dict[str, tuple[str, Callable[[], contextlib.AbstractContextManager[None]]]] = {
        "vanilla": ("vanilla", LightAttention),
        "light": (LINEARISED, LightAttention),
        "math": (LINEARISED, math_attention),
    }
    steppers = {
        arm: Stepper(copy.deepcopy(model), method, torch.device("cpu")) for arm, (method, _) in arms.items()
    }
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    try:
        for round_ in range(rounds + 1):  # round 0 warms up
            for arm, stepper in steppers.items():
                _use(arms[arm][1])
                tick = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    stepper.step(batch, labels)
                if round_:
                    times[arm].append(time.perf_counter() - tick)
    finally:
        _use(LightAttention)
    median = {arm: statistics.median(t) for arm, t in times.items()}
    return {"model": model_name, "batch_size": batch_size, "seq_len": seq_len, "batch_source": source,
            "rounds": rounds, "threads": torch.get_num_threads(), "step_s": median,
            "light_over_math": median["light"] / median["math"],
            "light_over_vanilla": median["light"] / median["vanilla"],
            "math_over_vanilla": median["math"] / median["vanilla"]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m research.attention_cost", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(json.dumps(measure(args.model, args.batch_size, args.seq_len, args.rounds), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
