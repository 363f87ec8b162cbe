"""Arithmetic that SMART's small perturbations survive: when a step linearises or leaves autocast; the teacher.

Under bf16 autocast every Linear rounds its input to bf16 (spacing 2^-8 ≈ 4e-3 near 0.5, the scale of a
LayerNorm-ed embedding), so x + δ with a small δ rounds back to x. Measured on MiniLM-L6 on CPU (eval mode,
16 RTE pairs, against an fp64 reference; `python -m research.numerics`, `research/results/numerics.json`):
with a perturbation of 0.01 per element the parameter gradient of R_s has cosine 0.54 with the fp64 one
under bf16 autocast and 1.000 in fp32; at 0.1 bf16 reaches 0.983. fp16 without loss scaling underflows
R_s's gradients (cosine 0.26 at 0.1, 0.95 at 1). fp32 resolves down to 1e-5, the paper's ε, just barely
(cosine 0.946, 0.999 at 1e-4; its R_s *value* is off by 82% there, its gradient is not), and fails below
(0.08 at 1e-6): `MethodConfig` refuses smaller ε and σ.

A pass whose perturbation the step's arithmetic cannot resolve has two ways out (`step_plan`, chosen by
MethodConfig.rs_arithmetic; components `fp32_step` and `linearized_step` say which ran):
- linearised (`auto` under bf16 or TF32, with `shared` or `off` dropout): R_s and its ascent direction from
  the second-order model at δ = 0, Jδ computed by a JVP at the step's arithmetic (smart_core.linearized).
  On MiniLM-L6 (8 sentences, eval mode) under bf16 at ε = σ = 1e-5 R_s is within 0.4% of fp64 and its
  gradient at cosine 0.9998 (fp32's exact difference: 3.8%, 0.945; tests/worker/training/
  test_linearized_minilm.py pins it); the model stops being quadratic around 0.1 per element (7%, 0.97),
  where bf16 starts resolving the plain difference. Passes at a resolved size (`renorm`'s final δ) stay plain.
- the exact fp32 step (`fp32`; `auto` with `independent` dropout, which one JVP pass cannot express, or
  under fp16): autocast off, fp32 with full-precision matmuls for the whole step, the clean forward and
  the task loss included: no tensor cores (an H200 at BERT-base × 512: 12.7× vanilla's time, 4.1× its memory).

TF32 (fp32 matmuls on CUDA's tensor cores, `torch.set_float32_matmul_precision("high")`, a common speed-up)
rounds matmul inputs to a 10-bit mantissa. Measured on an NVIDIA H200 (`research/results/numerics_h200.json`,
same batch): R_s's parameter-gradient cosine with fp64 is 0.074 at 1e-5 and 0.61 at 1e-3 under TF32,
0.988 from 1e-2; plain fp32 on that GPU gives 0.909 at 1e-5 and 0.999 at 1e-4. So TF32 counts as an
arithmetic of its own here (`TF32`), resolved from 1e-2, and a step below that leaves it the same ways.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from smart_core.config import MethodConfig

TF32 = "tf32"  # fp32 matmuls at reduced precision on CUDA, autocast off
Arithmetic = torch.dtype | str  # an autocast dtype, or TF32

# The smallest per-element perturbation (RMS) a forward at this arithmetic resolves (module docstring).
MIN_RESOLVED: dict[Arithmetic, float] = {torch.bfloat16: 0.1, torch.float16: 1.0, TF32: 0.01}
RENORM_RMS = 0.3  # `renorm` with ℓ∞: each token's largest element is ~1, its RMS ~0.3 (design notes)
# Where `rs_arithmetic: auto` linearises the passes below resolution instead of leaving for fp32.
LINEARIZED_AT: tuple[Arithmetic, ...] = (torch.bfloat16, TF32)


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


def pass_rms(config: MethodConfig, hidden: int, elements: int) -> tuple[float, float]:
    """Per-element RMS of the perturbations R_s's passes evaluate, for an example of `elements` numbers
    with `hidden` per token: (the smallest point an ascent gradient is taken at, math.inf without one; the
    final δ that R_s is measured at). The first ascent gradient is taken at the noise ν, later ones at the
    projected δ; `renorm`'s final δ is ~1 per token. FreeLB and PGD steps are large by design."""
    if config.method in ("freelb", "pgd"):
        return math.inf, math.inf
    noise = config.sigma / math.sqrt(3.0) if config.noise == "uniform" else config.sigma
    if config.ascent_steps == 0:
        return math.inf, noise
    if config.projection == "renorm":
        final = RENORM_RMS if config.norm_p == "inf" else 1.0 / math.sqrt(hidden)
    else:
        final = config.epsilon if config.norm_p == "inf" else config.epsilon / math.sqrt(elements)
    ascent = min(noise if noise > 0 else math.inf, final if config.ascent_steps > 1 else math.inf)
    return ascent, final


def perturbation_rms(config: MethodConfig, hidden: int, elements: int) -> float:
    """The per-element RMS of the smallest perturbation a step evaluates (`pass_rms`): what has to survive
    the rounding. `renorm`'s δ is ~1 per token, but its direction comes from the gradient at ν (σ = 1e-5),
    which bf16 rounds to zero, leaving renormalised random noise."""
    return min(pass_rms(config, hidden, elements))


def needs_fp32(config: MethodConfig, dtype: Arithmetic | None, hidden: int, elements: int) -> bool:
    """True when a regularised step at `dtype` (autocast's, or TF32) would round its perturbation away."""
    if dtype is None or not config.uses_smoothness:
        return False
    return perturbation_rms(config, hidden, elements) < MIN_RESOLVED.get(dtype, 0.0)


@dataclass(frozen=True)
class StepPlan:
    """How a step's R_s passes run (Objective): the whole step in fp32 (the exact path), or at the step's
    arithmetic with the passes below its resolution linearised (smart_core.linearized), or plainly."""

    fp32: bool = False  # autocast off, fp32 matmuls at full precision: the exact path
    linear_ascent: bool = False  # the ascent direction is 2 Jᵀ F J δ (a JVP and a VJP)
    linear_outer: bool = False  # R_s is (Jδ)ᵀ F (Jδ), from the clean forward's own JVP pass

    @property
    def linearized(self) -> bool:
        return self.linear_ascent or self.linear_outer


def step_plan(config: MethodConfig, arithmetic: Arithmetic | None, hidden: int, elements: int) -> StepPlan:
    """The plan for a step at `arithmetic` (step_arithmetic's answer) under `config.rs_arithmetic`:
    - fp32: the exact fp32 step whenever `needs_fp32` (the behaviour before linearisation existed);
    - auto: under bf16 or TF32, the passes whose perturbation that arithmetic cannot resolve are linearised,
      the others stay plain; `independent` dropout (a second draw for f(x + δ), which one JVP pass cannot
      express) and fp16 (whose limit is gradient underflow, which a tangent does not lift) keep the exact
      fp32 step; plain fp32 needs nothing;
    - linearized: the passes below bf16's resolution (or the arithmetic's, if coarser) are linearised at
      whatever arithmetic the step runs, fp32 included (MethodConfig refuses it with `independent`)."""
    if not config.uses_smoothness:
        return StepPlan()
    ascent, outer = pass_rms(config, hidden, elements)
    if config.rs_arithmetic == "linearized":
        resolved = max(MIN_RESOLVED[torch.bfloat16], MIN_RESOLVED.get(arithmetic, 0.0) if arithmetic else 0.0)
        return _linearized(config, ascent, outer, resolved)
    if not needs_fp32(config, arithmetic, hidden, elements):
        return StepPlan()
    if (
        config.rs_arithmetic == "fp32"
        or config.rs_dropout == "independent"
        or arithmetic is None  # unreachable (plain fp32 needs nothing); narrows the type for the lookup
        or arithmetic not in LINEARIZED_AT
    ):
        return StepPlan(fp32=True)
    return _linearized(config, ascent, outer, MIN_RESOLVED[arithmetic])


def _linearized(config: MethodConfig, ascent: float, outer: float, resolved: float) -> StepPlan:
    # A linearised R_s linearises its ascent too: its clean forward is the JVP pass after the ascent, so
    # an exact ascent gradient would have no f(x) to compare with.
    linear_outer = outer < resolved
    return StepPlan(
        linear_ascent=config.ascent_steps > 0 and (ascent < resolved or linear_outer),
        linear_outer=linear_outer,
    )


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
