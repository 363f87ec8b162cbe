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
- Under autocast, a step whose perturbation the autocast dtype cannot resolve runs in fp32
  (component `fp32_step` = 1).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from smart_core.adversarial import ascent_signal, smoothness_regularizer
from smart_core.baselines import freelb_loss, pgd_loss
from smart_core.bregman import ProximalReference
from smart_core.config import MethodConfig
from smart_core.divergences import divergence, task_loss
from smart_core.dropout import RngState, eval_mode, replaying
from smart_core.precision import full_precision, needs_fp32, step_arithmetic


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

    def _precision(self, x: Tensor) -> tuple[contextlib.AbstractContextManager[None], bool]:
        """fp32 for the rest of the step when autocast or TF32 would round this config's perturbation away."""
        dtype = step_arithmetic(x.device)
        if needs_fp32(self.config, dtype, hidden=x.shape[-1], elements=x.shape[1] * x.shape[-1]):
            return full_precision(x.device), True
        return contextlib.nullcontext(), False

    def _smart(self, fns: ModelFns, labels: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        cfg = self.config
        device = fns.mask.device
        embed_rng = RngState.capture(device)  # the teacher's `shared` masks: embedding included
        x = fns.embed()  # embedded once (autocast leaves it fp32); every forward of this step starts from x
        precision, fp32_step = self._precision(x)
        with precision:
            clean_rng = RngState.capture(device)  # the R_s forwards' `shared` masks
            clean = fns.forward(x)
            task = task_loss(clean, labels, self.regression)
            loss = task
            parts: dict[str, Tensor] = {"task_loss": task.detach()}
            if cfg.uses_smoothness:
                loss = loss + cfg.lambda_s * self._regularizer(fns, x, clean, clean_rng, task, parts)
                parts["fp32_step"] = torch.tensor(float(fp32_step), device=device)
            if self.reference is not None:
                teacher = self.reference.outputs(lambda: fns.forward(fns.embed()), embed_rng)
                d_breg = divergence(clean, teacher, regression=self.regression)
                loss = loss + cfg.mu * d_breg
                parts["d_breg"] = d_breg.detach()
        return loss, parts

    def _regularizer(
        self,
        fns: ModelFns,
        x: Tensor,
        clean: Tensor,
        clean_rng: RngState,
        task: Tensor,
        parts: dict[str, Tensor],
    ) -> Tensor:
        cfg = self.config
        mode = cfg.rs_dropout

        def forward(embeddings: Tensor) -> Tensor:
            quiet = eval_mode(self.module) if mode == "off" else contextlib.nullcontext()
            with quiet, replaying(clean_rng if mode == "shared" else None):
                return fns.forward(embeddings)

        if mode == "off":
            with eval_mode(self.module):
                x = fns.embed()  # without the embedding's dropout either
            reference = forward(x)  # with graph: R_s's gradient reaches the weights through both sides
        else:
            reference = clean
        adv = smoothness_regularizer(x, reference, forward, fns.mask, cfg, self.regression, self.generator)
        parts |= {
            "r_s": adv.r_s.detach(),
            "delta_linf": adv.delta_linf,
            "delta_l2": adv.delta_l2,
            "step_to_noise": adv.step_to_noise,
            "nonfinite_skips": adv.skipped,
        }
        if self.diagnostic_params:
            parts["grad_ratio_rs"] = gradient_norm_ratio(adv.r_s, task, self.diagnostic_params)
        if cfg.diagnostics_every and self.steps % cfg.diagnostics_every == 0:
            parts |= self._diagnostics(fns, x, reference, forward)
        return adv.r_s

    def _diagnostics(
        self, fns: ModelFns, x: Tensor, reference: Tensor, forward: Callable[[Tensor], Tensor]
    ) -> dict[str, Tensor]:
        """R_s at δ = 0 (what the regulariser measures without any perturbation: the dropout-only part)
        and the ascent's signal. They leave the random stream where it was, so training does not depend
        on whether and how often they run."""
        cfg = self.config
        out: dict[str, Tensor] = {}
        noise_state = self.generator.get_state() if self.generator is not None else None
        with replaying(RngState.capture(x.device)):
            with torch.no_grad():
                out["r_s_control"] = divergence(
                    forward(x.detach()), reference.detach(), regression=self.regression
                )
            if cfg.ascent_steps > 0 and cfg.sigma > 0:
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
