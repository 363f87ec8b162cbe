"""One training step's loss for any method: task loss + λ_s·R_s + μ·D_Breg, or a baseline's loss.

Pure: takes callables and tensors, returns (loss with graph, components); never logs, never touches files.
The caller back-propagates `loss`, clips, steps the optimiser, then calls `after_update()`.

The model enters through `ModelFns`:
    embed()                 -> x, the embedding-layer output (B, T, H), with graph
    forward(embeddings)     -> outputs from embeddings: logits (B, C) or regression predictions (B,)
    mask                    (B, T), 1 on real tokens
With λ_s = 0 and μ = 0 the step is exactly the vanilla step: the same single forward, no random draw.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from smart_core.adversarial import smoothness_regularizer
from smart_core.baselines import freelb_loss, pgd_loss
from smart_core.bregman import ProximalReference
from smart_core.config import MethodConfig
from smart_core.divergences import divergence, task_loss


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
        self.diagnostic_params = list(diagnostic_params)  # where ‖∇R_s‖/‖∇L‖ is measured (e.g. the head)
        self.reference: ProximalReference | None = None
        if config.uses_bregman:
            if module is None:
                raise ValueError("the Bregman term needs the module whose weights the reference tracks")
            self.reference = ProximalReference(module, config, planned_updates)
        self.nonfinite_skips = 0  # running count over the objective's lifetime

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
        self.nonfinite_skips += int(parts.get("nonfinite_skips", torch.zeros(())).item())
        parts["loss"] = loss.detach()
        return loss, parts

    def _smart(self, fns: ModelFns, labels: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        cfg = self.config
        x = fns.embed()  # embedded once; every forward of this step starts from x
        clean = fns.forward(x)
        task = task_loss(clean, labels, self.regression)
        loss = task
        parts: dict[str, Tensor] = {"task_loss": task.detach()}
        if cfg.uses_smoothness:
            adv = smoothness_regularizer(
                x, clean, fns.forward, fns.mask, cfg, self.regression, self.generator
            )
            loss = loss + cfg.lambda_s * adv.r_s
            parts |= {
                "r_s": adv.r_s.detach(),
                "delta_linf": adv.delta_linf,
                "delta_l2": adv.delta_l2,
                "step_to_noise": adv.step_to_noise,
                "nonfinite_skips": torch.tensor(float(adv.skipped)),
            }
            if self.diagnostic_params and not adv.skipped:
                parts["grad_ratio_rs"] = gradient_norm_ratio(adv.r_s, task, self.diagnostic_params)
        if self.reference is not None:
            teacher = self.reference.outputs(lambda: fns.forward(fns.embed()))
            d_breg = divergence(clean, teacher, regression=self.regression)
            loss = loss + cfg.mu * d_breg
            parts["d_breg"] = d_breg.detach()
        return loss, parts

    def after_update(self) -> None:
        """Call after each optimiser step: refreshes the Bregman reference on its schedule."""
        if self.reference is not None:
            self.reference.after_update()
