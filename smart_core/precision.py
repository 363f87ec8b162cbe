"""Arithmetic that SMART's small perturbations survive: when a step must leave autocast, and the teacher.

Under bf16 autocast every Linear rounds its input to bf16 (spacing 2^-8 ≈ 4e-3 near 0.5, the scale of a
LayerNorm-ed embedding), so x + δ with a small δ rounds back to x. Measured on MiniLM-L6 (eval mode, 16
RTE pairs, against an fp64 reference; `smartune bench numerics`): with a perturbation of 0.01 per element
the parameter gradient of R_s has cosine 0.62 with the fp64 one under bf16 autocast and 1.000 in fp32;
at 0.1 bf16 reaches 0.993. fp16 without loss scaling underflows R_s's gradients (cosine 0.29 at 0.1,
0.96 at 1). fp32 resolves down to 1e-5, the paper's ε (cosine 0.989; its R_s *value* is off by ~30% there,
its gradient is not), and fails below (0.50 at 1e-6): `MethodConfig` refuses smaller ε and σ.

So a SMART or R3F step whose perturbation is below the autocast dtype's resolution runs with autocast
off, in fp32 with full-precision matmuls, and says so in its components.

TF32 (fp32 matmuls on CUDA's tensor cores, `torch.set_float32_matmul_precision("high")`, a common speed-up)
rounds matmul inputs to a 10-bit mantissa. Measured on an NVIDIA H200 (`bench/results/numerics_h200.json`,
same batch): R_s's parameter-gradient cosine with fp64 is 0.074 at 1e-5 and 0.61 at 1e-3 under TF32,
0.988 from 1e-2; plain fp32 on that GPU gives 0.909 at 1e-5 and 0.999 at 1e-4. So TF32 counts as an
arithmetic of its own here (`TF32`), resolved from 1e-2, and a step below that leaves it the same way.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch

from smart_core.config import MethodConfig

TF32 = "tf32"  # fp32 matmuls at reduced precision on CUDA, autocast off
Arithmetic = torch.dtype | str  # an autocast dtype, or TF32

# The smallest per-element perturbation (RMS) a forward at this arithmetic resolves (module docstring).
MIN_RESOLVED: dict[Arithmetic, float] = {torch.bfloat16: 0.1, torch.float16: 1.0, TF32: 0.01}
RENORM_RMS = 0.3  # `renorm` with ℓ∞: each token's largest element is ~1, its RMS ~0.3 (design notes)


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The low-precision dtype autocast is running at on `device`'s type, or None when it is off."""
    if not torch.is_autocast_enabled(device.type):
        return None
    return torch.get_autocast_dtype(device.type)


def step_arithmetic(device: torch.device) -> Arithmetic | None:
    """The reduced arithmetic a forward on `device` runs at: autocast's dtype, else TF32 when fp32
    matmuls on CUDA are allowed below full precision, else None (plain fp32)."""
    dtype = autocast_dtype(device)
    if dtype is not None:
        return dtype
    if device.type == "cuda" and torch.get_float32_matmul_precision() != "highest":
        return TF32
    return None


def perturbation_rms(config: MethodConfig, hidden: int, elements: int) -> float:
    """The per-element RMS of the smallest perturbation a step evaluates, for an example of `elements`
    numbers with `hidden` per token: what has to survive the rounding. That is the noise ν where the first
    ascent gradient is taken, and the final δ: `renorm`'s δ is ~1 per token, but its direction comes from
    the gradient at ν (σ = 1e-5), which bf16 rounds to zero, leaving renormalised random noise.
    FreeLB and PGD steps are large by design."""
    if config.method in ("freelb", "pgd"):
        return math.inf
    noise = config.sigma / math.sqrt(3.0) if config.noise == "uniform" else config.sigma
    if config.ascent_steps == 0:
        return noise
    if config.projection == "renorm":
        final = RENORM_RMS if config.norm_p == "inf" else 1.0 / math.sqrt(hidden)
    else:
        final = config.epsilon if config.norm_p == "inf" else config.epsilon / math.sqrt(elements)
    return min(noise, final) if noise > 0 else final


def needs_fp32(config: MethodConfig, dtype: Arithmetic | None, hidden: int, elements: int) -> bool:
    """True when a regularised step at `dtype` (autocast's, or TF32) would round its perturbation away."""
    if dtype is None or not config.uses_smoothness:
        return False
    return perturbation_rms(config, hidden, elements) < MIN_RESOLVED.get(dtype, 0.0)


@contextlib.contextmanager
def full_precision(device: torch.device) -> Iterator[None]:
    """Autocast off and fp32 matmuls at full precision for the body; the caller's settings afterwards."""
    matmul = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        with torch.autocast(device.type, enabled=False):
            yield
    finally:
        torch.set_float32_matmul_precision(matmul)


@contextlib.contextmanager
def uncached_autocast(device: torch.device) -> Iterator[None]:
    """The current autocast setting without its weight-cast cache, for a forward whose weights were
    swapped in through `.data` (the teacher): the cache is keyed on the parameter, not on its data, so a
    cached forward would reuse the student's low-precision weights. A no-op when autocast is off."""
    dtype = autocast_dtype(device)
    if dtype is None:
        yield
        return
    with torch.autocast(device.type, dtype=dtype, cache_enabled=False):
        yield
