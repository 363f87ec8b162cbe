"""`python -m research.numerics`: what SMART's regulariser measures, by projection, dropout mode and precision.

Two parts, both on MiniLM-L6 and the first RTE training pairs (`fixed_batch`, 16 pairs at 128 tokens by
default):
- `regulariser`: per projection (`ball` at the paper's ε = σ = 1e-5, η = 1e-3; `renorm` as mt-dnn), per
  dropout mode of the R_s forwards (independent, shared, off) and per precision (fp32; bf16 autocast as
  the arithmetic would have it, i.e. without the trainer's fp32 fallback; bf16 autocast as trained), the
  mean ± std over `draws` draws (noise and dropout) of R_s, the applied ‖δ‖∞, R_s at δ = 0 (the control:
  what R_s reads with no perturbation at all) and the ascent's signal (cosine of g(ν) and −g(−ν)). Model
  in train mode, as in training. Each draw is one `smart_core.Objective` call with the method's config.
- `resolution`: in eval mode, how well each precision reproduces an fp64 reference as the perturbation
  shrinks: the cosine of R_s's parameter gradient and the relative error of its value for a perturbation
  of ±s on every element, and the cosine of the ascent gradient at ν ~ N(0, s²). These numbers set
  `smart_core.precision.MIN_RESOLVED` and `smart_core.config.MIN_PERTURBATION`. Beside the plain
  differences, `bf16-linearized`: R_s as `rs_arithmetic: auto` computes it under bf16 autocast (Jδ by a
  JVP, its quadratic form; the ascent as 2JᵀFJν: smart_core.linearized), which shows where the quadratic
  model stops holding as s grows.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import platform
import statistics
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
import transformers
from torch import Tensor, nn

from bench.padding import Batch, fixed_batch
from bench.stepper import load_model
from smart_core import ModelFns, Objective, method_config
from smart_core import precision as precision_module
from smart_core.divergences import divergence
from smart_core.linearized import jvp, linear_ascent_gradient, quadratic_divergence
from worker.training.adapter import EmbeddingAdapter

PROJECTIONS = {"ball": "smart", "renorm": "smart-renorm"}  # method presets, λ_s 1, no teacher (μ = 0)
MODES = ("independent", "shared", "off")
PRECISIONS = ("fp32", "bf16-raw", "bf16-trained")
TABLES = "regulariser,resolution"
SCALES = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)
PARTS = ("r_s", "delta_linf", "step_to_noise", "r_s_control", "ascent_signal", "fp32_step")


@contextlib.contextmanager
def _arithmetic(name: str, device_type: str = "cpu") -> Iterator[None]:
    """fp32; bf16 autocast with the trainer's fp32 fallback switched off (what bf16 itself does to R_s);
    bf16 autocast as the trainer runs it."""
    if name == "fp32":
        yield
        return
    saved = dict(precision_module.MIN_RESOLVED)
    if name == "bf16-raw":
        precision_module.MIN_RESOLVED.clear()  # this benchmark only: measure the arithmetic unguarded
    try:
        with torch.autocast(device_type, dtype=torch.bfloat16):
            yield
    finally:
        precision_module.MIN_RESOLVED.update(saved)


def _mean_std(values: list[float]) -> dict[str, float]:
    if any(v != v for v in values):  # NaN: not measured (statistics.stdev cannot take it)
        return {"mean": float("nan"), "std": float("nan")}
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0}


def regulariser(model: nn.Module, batch: Batch, labels: Tensor, draws: int) -> list[dict[str, Any]]:
    rows = []
    adapter = EmbeddingAdapter(model, is_regression=False)
    fns = ModelFns(lambda: adapter.embed(batch), lambda e: adapter.forward_from_embeddings(batch, e),
                   batch["attention_mask"])  # fmt: skip
    model.train()
    for projection, preset in PROJECTIONS.items():
        for mode in MODES:
            config = method_config(preset, mu=0.0, bregman="none", rs_dropout=mode, diagnostics_every=1)
            for arithmetic in PRECISIONS:
                samples: dict[str, list[float]] = {k: [] for k in PARTS}
                for draw in range(draws):
                    torch.manual_seed(1000 + draw)
                    objective = Objective(config, regression=False, module=model)
                    with _arithmetic(arithmetic, labels.device.type):
                        _, parts = objective(fns, labels)
                    for key in PARTS:  # a linearised ascent measures no signal (smart_core.objective)
                        samples[key].append(float(parts[key]) if key in parts else float("nan"))
                row = {"projection": projection, "rs_dropout": mode, "precision": arithmetic}
                rows.append(row | {k: _mean_std(v) for k, v in samples.items()})
                print(
                    f"[numerics] {projection} {mode} {arithmetic}: R_s {row_text(rows[-1])}", file=sys.stderr
                )
    return rows


def row_text(row: dict[str, Any]) -> str:
    def f(key: str) -> str:
        return f"{row[key]['mean']:.2g} ± {row[key]['std']:.1g}"

    return (f"{f('r_s')} | ‖δ‖∞ {f('delta_linf')} | step/noise {f('step_to_noise')} | δ=0 {f('r_s_control')} | "
            f"signal {f('ascent_signal')} | "
            f"fp32 steps {row['fp32_step']['mean']:.0%}")  # fmt: skip


def _cosine(a: Tensor, b: Tensor) -> float:
    a, b = a.double().flatten(), b.double().flatten()
    return float(a @ b / (a.norm() * b.norm()).clamp_min(1e-300))  # not F.cosine_similarity: eps 1e-8


def _param_grad(
    model: nn.Module, forward: Callable[[Tensor], Tensor], x: Tensor, delta: Tensor
) -> tuple[Tensor, float]:
    r_s = divergence(forward(x + delta), forward(x), regression=False)
    return _flat_grad(r_s, model), float(r_s.detach())


def _ascent_grad(forward: Callable[[Tensor], Tensor], x: Tensor, nu: Tensor) -> Tensor:
    delta = nu.clone().requires_grad_(True)
    with torch.no_grad():
        target = forward(x)
    inner = divergence(forward(x + delta), target, regression=False, reduction="sum")
    return torch.autograd.grad(inner, delta)[0].double()


def _flat_grad(r_s: Tensor, model: nn.Module) -> Tensor:
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(r_s, params, allow_unused=True)
    return torch.cat(
        [
            (g if g is not None else torch.zeros_like(p)).double().flatten()
            for g, p in zip(grads, params, strict=True)
        ]
    )


def _linearized(
    model: nn.Module, forward: Callable[[Tensor], Tensor], x: Tensor, sign: Tensor, nu: Tensor
) -> tuple[Tensor, float, Tensor]:
    """R_s's parameter gradient and value, and the ascent gradient, as `rs_arithmetic: auto` computes them
    under bf16 autocast (smart_core.linearized)."""
    with torch.autocast(x.device.type, dtype=torch.bfloat16):
        clean, moved = jvp(forward, x, sign)
        r_s = quadratic_divergence(clean, moved, regression=False)
        ascent = linear_ascent_gradient(x, nu, None, forward, regression=False)
    return _flat_grad(r_s, model), float(r_s.detach()), ascent.double()


def _variants(device: torch.device) -> list[tuple[str, torch.dtype | None]]:
    """fp32, bf16 and fp16 autocast; on CUDA also fp32 with TF32 matmuls (`set_float32_matmul_precision
    ("high")`, a common speed-up on Ampere and later), which rounds matmul inputs to a 10-bit mantissa."""
    out: list[tuple[str, torch.dtype | None]] = [
        ("fp32", None),
        ("bf16", torch.bfloat16),
        ("fp16", torch.float16),
    ]
    return out + ([("tf32", None)] if device.type == "cuda" else [])


@contextlib.contextmanager
def _variant_context(name: str, dtype: torch.dtype | None, device: torch.device) -> Iterator[None]:
    if dtype is not None:
        with torch.autocast(device.type, dtype=dtype):
            yield
        return
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if name == "tf32" else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)


def resolution(model: nn.Module, batch: Batch) -> list[dict[str, Any]]:
    model.eval()
    exact = copy.deepcopy(model).double()
    low, high = EmbeddingAdapter(model, is_regression=False), EmbeddingAdapter(exact, is_regression=False)
    mask = batch["attention_mask"].unsqueeze(-1)
    with torch.no_grad():
        x = low.embed(batch)
    direction = torch.randn(x.shape, generator=torch.Generator().manual_seed(3)).to(x.device) * mask
    rows = []
    for scale in SCALES:
        sign, nu = direction.sign() * scale, direction * scale
        ref_grad, ref_value = _param_grad(
            exact, lambda e: high.forward_from_embeddings(batch, e), x.double(), sign.double()
        )
        ref_ascent = _ascent_grad(lambda e: high.forward_from_embeddings(batch, e), x.double(), nu.double())
        row: dict[str, Any] = {"scale": scale, "r_s_fp64": ref_value}
        for name, dtype in _variants(x.device):
            context = _variant_context(name, dtype, x.device)
            with context:
                grad, value = _param_grad(model, lambda e: low.forward_from_embeddings(batch, e), x, sign)
                ascent = _ascent_grad(lambda e: low.forward_from_embeddings(batch, e), x, nu)
            row[name] = {"param_grad_cosine": _cosine(grad, ref_grad),
                         "r_s_relative_error": abs(value - ref_value) / ref_value,
                         "ascent_cosine": _cosine(ascent, ref_ascent)}  # fmt: skip
        grad, value, ascent = _linearized(model, lambda e: low.forward_from_embeddings(batch, e), x, sign, nu)
        row["bf16-linearized"] = {"param_grad_cosine": _cosine(grad, ref_grad),
                                  "r_s_relative_error": abs(value - ref_value) / ref_value,
                                  "ascent_cosine": _cosine(ascent, ref_ascent)}  # fmt: skip
        print(f"[numerics] scale {scale:g}: " + ", ".join(
            f"{n} grad cos {row[n]['param_grad_cosine']:.3f}" for n, _ in _variants(x.device)), file=sys.stderr)  # fmt: skip
        rows.append(row)
    return rows


def markdown(result: dict[str, Any]) -> str:
    lines = ["| projection | dropout | precision | R_s | ‖δ‖∞ | ‖η·ĝ‖/‖ν‖ | R_s at δ = 0 | ascent signal | fp32 steps |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip

    def f(cell: dict[str, float]) -> str:
        return f"{cell['mean']:.2g} ± {cell['std']:.1g}"

    for r in result["regulariser"]:
        step = f(r["step_to_noise"]) if "step_to_noise" in r else "n/a"
        lines.append(f"| {r['projection']} | {r['rs_dropout']} | {r['precision']} | {f(r['r_s'])} | "
                     f"{f(r['delta_linf'])} | {step} | {f(r['r_s_control'])} | {f(r['ascent_signal'])} | "
                     f"{r['fp32_step']['mean']:.0%} |")  # fmt: skip
    names = [
        n
        for n in ("fp32", "bf16", "fp16", "tf32", "bf16-linearized")
        if result["resolution"] and n in result["resolution"][0]
    ]
    lines += [
        "",
        "| perturbation | R_s (fp64) | " + " | ".join(f"{n} grad cos / value error" for n in names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for r in result["resolution"]:
        cells = [f"{r[n]['param_grad_cosine']:.3f} / {r[n]['r_s_relative_error']:.2g}" for n in names]
        lines.append(f"| {r['scale']:g} | {r['r_s_fp64']:.2g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads or torch.get_num_threads())
    device = torch.device(getattr(args, "device", "cpu"))
    model, tokenizer = load_model(args.model)
    model.to(device)
    batch, labels, source = fixed_batch(tokenizer, args.pairs, args.seq_len)
    batch, labels = {k: v.to(device) for k, v in batch.items()}, labels.to(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    setup = {"model": args.model, "pairs": args.pairs, "seq_len": args.seq_len, "batch_source": source,
             "draws": args.draws, "device": name, "cpu": platform.processor() or platform.machine(),
             "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
             "transformers": transformers.__version__,
             "configs": {p: method_config(m).to_dict() for p, m in PROJECTIONS.items()}}  # fmt: skip
    parts = {p.strip() for p in str(getattr(args, "parts", TABLES)).split(",")}
    if not parts or parts - set(TABLES.split(",")):
        raise SystemExit(f"--parts: a comma list of {TABLES}, got {getattr(args, 'parts', '')!r}")
    return {"setup": setup,
            "regulariser": regulariser(model, batch, labels, args.draws) if "regulariser" in parts else [],
            "resolution": resolution(model, batch) if "resolution" in parts else []}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.numerics", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--pairs", type=int, default=16, help="RTE training pairs in the batch")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--draws", type=int, default=20, help="noise and dropout draws per cell")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N] (on CUDA also TF32 matmuls)")
    parser.add_argument("--parts", default=TABLES, help="which tables to compute")
    parser.add_argument("--json", action="store_true", help="print one JSON object, not markdown tables")
    args = parser.parse_args(argv)
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
