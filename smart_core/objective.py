"""One training step's loss for any method: task loss + λ_s·R_s + μ·D_Breg, or a baseline's loss.

Pure: takes callables and tensors, returns (loss with graph, components); never logs, never touches files,
never waits for the accelerator (components stay on the device). The caller back-propagates `loss`,
clips, steps the optimiser, then calls `after_update()`.

The model enters through `ModelFns`:
    embed()                 -> x, the embeddings to perturb (B, T, H), with graph
    forward(embeddings)     -> outputs from embeddings: logits (B, C) or regression predictions (B,)
    mask                    (B, T), 1 on real tokens
With λ_s = 0 and μ = 0 the step is exactly the vanilla step: the same single forward, no random draw.

The step's dropout and precision (smart_core.dropout, smart_core.precision):
- R_s compares f(x + δ) with a reference f(x) taken under the same dropout treatment: the clean forward
  itself for `independent` and `shared` (whose extra forwards replay the clean forward's masks), a second
  clean forward in eval mode for `off` (one more forward with graph).
- Under autocast (or TF32), R_s's passes at a perturbation the arithmetic cannot resolve are linearised at
  it (component `linearized_step` = 1; smart_core.linearized: then the clean forward of `shared` is the JVP
  pass that also gives Jδ), or the whole step runs in fp32 (`fp32_step` = 1): smart_core.precision.step_plan.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from smart_core.adversarial import (
    ascent_signal,
    exact_ascent_gradient,
    input_gradient_only,
    smoothness_regularizer,
    weights_frozen,
)
from smart_core.attention import LightAttention
from smart_core.baselines import freelb_loss, pgd_loss
from smart_core.bregman import ProximalReference
from smart_core.config import MethodConfig
from smart_core.divergences import divergence, task_loss
from smart_core.dropout import RngState, eval_mode, replaying
from smart_core.linear import casts_shared
from smart_core.linearized import linear_ascent_gradient, linearized_regularizer
from smart_core.perturbation import initial_noise
from smart_core.precision import StepPlan, full_precision, step_arithmetic, step_plan


@dataclass
class ModelFns:
    embed: Callable[[], Tensor]
    forward: Callable[[Tensor], Tensor]
    mask: Tensor


def gradient_norm_ratio(numerator: Tensor, denominator: Tensor, params: Sequence[nn.Parameter]) -> Tensor:
    """‖∇_p numerator‖ / ‖∇_p denominator‖ over `params` (retains the graph; parameter .grad untouched)."""
    params = [p for p in params if p.requires_grad]
    if not params or not numerator.requires_grad or not denominator.requires_grad:
        return torch.zeros(())
    num = torch.autograd.grad(numerator, params, retain_graph=True, allow_unused=True)
    den = torch.autograd.grad(denominator, params, retain_graph=True, allow_unused=True)

    def norm(grads: Sequence[Tensor | None]) -> Tensor:
        return torch.sqrt(
            sum(
                (g.float().pow(2).sum() for g in grads if g is not None),
                torch.zeros((), device=params[0].device),
            )
        )

    return (norm(num) / norm(den).clamp_min(1e-30)).detach()


def runs_compiled(module: nn.Module | None) -> bool:
    """Whether any part of `module` runs compiled (`module.compile()` or a `torch.compile` wrapper)."""
    if module is None:
        return False
    # module.compile() sets _compiled_call_impl; torch.compile(module) wraps it as _orig_mod (OptimizedModule)
    return any(
        getattr(m, "_compiled_call_impl", None) is not None or "_orig_mod" in m._modules
        for m in module.modules()
    )


class Objective:
    """Computes a method's loss for a batch and keeps the Bregman reference between steps."""

    def __init__(
        self,
        config: MethodConfig,
        *,
        regression: bool,
        module: nn.Module | None = None,
        planned_updates: int = 1,
        diagnostic_params: Sequence[nn.Parameter] = (),
        generator: torch.Generator | None = None,
    ) -> None:
        self.config = config
        self.regression = regression
        self.generator = generator
        self.module = module
        self.diagnostic_params = list(diagnostic_params)  # where ‖∇R_s‖/‖∇L‖ is measured (e.g. the head)
        self.reference: ProximalReference | None = None
        if config.uses_bregman:
            if module is None:
                raise ValueError("the Bregman term needs the module whose weights the reference tracks")
            self.reference = ProximalReference(module, config, planned_updates)
        if config.uses_smoothness and config.rs_dropout == "off" and module is None:
            raise ValueError(
                "rs_dropout='off' needs the module, to run the regulariser's forwards in eval mode"
            )
        self.steps = 0  # optimiser updates so far (after_update calls): when the diagnostics run
        self._skips: Tensor | int = 0  # non-finite regulariser gradients so far, on the device

    @property
    def nonfinite_skips(self) -> int:
        """Batches whose regulariser was skipped for a non-finite gradient (reads the device once)."""
        return int(self._skips)

    @nonfinite_skips.setter
    def nonfinite_skips(self, value: int) -> None:
        self._skips = int(value)

    def __call__(self, fns: ModelFns, labels: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        method = self.config.method
        if method == "freelb":
            loss, parts = freelb_loss(
                fns.embed, fns.forward, fns.mask, labels, self.config, self.regression, self.generator
            )
        elif method == "pgd":
            loss, parts = pgd_loss(
                fns.embed, fns.forward, fns.mask, labels, self.config, self.regression, self.generator
            )
        else:
            loss, parts = self._smart(fns, labels)
        if "nonfinite_skips" in parts:
            self._skips = self._skips + parts["nonfinite_skips"].detach()
        parts["loss"] = loss.detach()
        return loss, parts

    def _plan(self, x: Tensor) -> StepPlan:
        """How this step's R_s passes run at the arithmetic of x's device (smart_core.precision.step_plan)."""
        arithmetic = step_arithmetic(x.device)
        return step_plan(self.config, arithmetic, hidden=x.shape[-1], elements=x.shape[1] * x.shape[-1])

    def _smart(self, fns: ModelFns, labels: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        cfg = self.config
        device = fns.mask.device
        embed_rng = RngState.capture(device)  # the teacher's `shared` masks: embedding included
        x = fns.embed()  # embedded once (autocast leaves it fp32); every forward of this step starts from x
        plan = self._plan(x)
        precision = full_precision(device) if plan.fp32 else contextlib.nullcontext()
        # A linearised step's forwards all take smart_core.attention: the JVP passes need it, and `shared`
        # dropout masks (R_s's, the teacher's) replay only through the same attention kernel.
        attention = LightAttention() if plan.linearized else contextlib.nullcontext()
        parts: dict[str, Tensor] = {}
        with precision, attention:
            if cfg.uses_smoothness:
                clean, r_s = self._regularizer(fns, x, plan, parts)
            else:
                clean = fns.forward(x)
            task = task_loss(clean, labels, self.regression)
            loss = task
            parts["task_loss"] = task.detach()
            if cfg.uses_smoothness:
                loss = loss + cfg.lambda_s * r_s
                parts["fp32_step"] = torch.tensor(float(plan.fp32), device=device)
                parts["linearized_step"] = torch.tensor(float(plan.linearized), device=device)
                if self.diagnostic_params:
                    parts["grad_ratio_rs"] = gradient_norm_ratio(r_s, task, self.diagnostic_params)
            if self.reference is not None:
                teacher = self.reference.outputs(lambda: fns.forward(fns.embed()), embed_rng)
                d_breg = divergence(clean, teacher, regression=self.regression)
                loss = loss + cfg.mu * d_breg
                parts["d_breg"] = d_breg.detach()
        return loss, parts

    def _regularizer(
        self, fns: ModelFns, x: Tensor, plan: StepPlan, parts: dict[str, Tensor]
    ) -> tuple[Tensor, Tensor]:
        """(the clean outputs f(x), R_s), both with graph; R_s's components go into `parts`."""
        cfg = self.config
        mode = cfg.rs_dropout
        noise = None
        if plan.linear_outer and mode == "shared":
            # The clean forward is the JVP pass below, after the ascent: ν is drawn before the masks' state
            # is taken, so ν and the masks (drawn by that pass, replayed by the ascent) never share draws.
            noise = initial_noise(x.detach(), fns.mask, cfg.sigma, cfg.noise, self.generator)
        clean_rng = RngState.capture(x.device)  # the R_s forwards' `shared` masks

        def forward(embeddings: Tensor) -> Tensor:
            quiet = eval_mode(self.module) if mode == "off" else contextlib.nullcontext()
            with quiet, replaying(clean_rng if mode == "shared" else None):
                return fns.forward(embeddings)

        x_rs = x  # where R_s is measured: `off` compares eval-mode forwards of an eval-mode embedding
        if mode == "off":
            with eval_mode(self.module):
                x_rs = fns.embed()  # without the embedding's dropout either (draws nothing)
        if cfg.diagnostics_every and self.steps % cfg.diagnostics_every == 0:
            parts |= self._diagnostics(fns, x_rs, forward, plan)  # before any graph of this step exists
        # The ascent needs δ's gradient only: the weights are frozen for it, so its graph keeps no
        # activations for their gradients (smart_core.adversarial.weights_frozen).
        dual = not runs_compiled(self.module)  # smart_core.linearized.jvp: dual tensors unless compiled
        gradient = input_gradient_only(
            functools.partial(linear_ascent_gradient, dual=dual)
            if plan.linear_ascent
            else exact_ascent_gradient,
            self.module,
        )
        if plan.linear_outer:
            clean = fns.forward(x) if mode == "off" else None
            # `shared`: the final JVP pass is the clean forward itself, drawing the masks the ascent replayed.
            # the passes' linear layers cast each weight once (not where compiled code casts its own)
            with casts_shared(self.module if dual else None):
                reference, adv = linearized_regularizer(
                    x_rs, forward, fns.mask, cfg, self.regression, self.generator,
                    outer_forward=forward if mode == "off" else fns.forward, noise=noise, gradient=gradient,
                    dual=dual,
                )  # fmt: skip
            clean = reference if clean is None else clean
        else:
            clean = fns.forward(x)
            # `off`: with graph, R_s's gradient reaches the weights through both sides
            reference = forward(x_rs) if mode == "off" else clean
            adv = smoothness_regularizer(
                x_rs, reference, forward, fns.mask, cfg, self.regression, self.generator, gradient=gradient
            )
        parts |= {
            "r_s": adv.r_s.detach(),
            "delta_linf": adv.delta_linf,
            "delta_l2": adv.delta_l2,
            "step_to_noise": adv.step_to_noise,
            "nonfinite_skips": adv.skipped,
        }
        return clean, adv.r_s

    def _diagnostics(
        self, fns: ModelFns, x: Tensor, forward: Callable[[Tensor], Tensor], plan: StepPlan
    ) -> dict[str, Tensor]:
        """R_s at δ = 0 (what the regulariser measures without any perturbation: the dropout-only part)
        and the ascent's signal, measured before the step builds its graph and keeping none: the reference
        f(x) and the control are no-grad forwards, the signal takes input gradients only, one forward at a
        time. The reference draws the clean forward's masks (it runs first, from the state the clean
        forward will start at), the control a draw of its own (`independent`) or the same masks (`shared`).
        They leave the random stream where it was, so training does not depend on whether and how often
        they run. On a linearised ascent the gradient is linear in ν by construction, so its mirror image
        says nothing: no signal is measured there."""
        cfg = self.config
        out: dict[str, Tensor] = {}
        noise_state = self.generator.get_state() if self.generator is not None else None
        with replaying(RngState.capture(x.device)):
            with torch.no_grad():
                reference = forward(x.detach())
                out["r_s_control"] = divergence(forward(x.detach()), reference, regression=self.regression)
            if cfg.ascent_steps > 0 and cfg.sigma > 0 and not plan.linear_ascent:
                with weights_frozen(self.module):  # input gradients only: no activation kept for the weights
                    out["ascent_signal"] = ascent_signal(
                        x, reference, forward, fns.mask, cfg, self.regression, self.generator
                    )
        if self.generator is not None and noise_state is not None:
            self.generator.set_state(noise_state)
        return out

    def after_update(self) -> None:
        """Call after each optimiser step: refreshes the Bregman reference on its schedule."""
        self.steps += 1
        if self.reference is not None:
            self.reference.after_update()
