"""Adversarial-training baselines from the same perturbation machinery: FreeLB and PGD.

Both perturb the embeddings the caller's `embed` returns (the word embeddings, by the presets, as in
both papers' code) with a fp32 δ that is zero on padding, and optionally project to `adv_max_norm`.
- FreeLB (Zhu et al. 2020, Algorithm 1): K steps; each step's loss ℓ(f(x + δ_k), y)/K is back-propagated
  in full, so parameter gradients ACCUMULATE over the K steps (one optimiser update per batch); δ steps
  α·g/‖g‖ (ℓ2 or ℓ∞ per example). All K forwards use the same dropout masks (the paper's Table 4; its code
  patches ALBERT for it), by replaying the random-number state of the first. The first K−1 backward passes
  happen inside `freelb_loss`; the returned loss carries step K's graph for the caller.
- PGD (Madry et al. 2018): K input-gradient-only ascent steps on the task loss, δ ← Π(δ + α·g/‖g‖₂) for
  ℓ2 or Π(δ + α·sign(g)) for ℓ∞, then train on the adversarial loss alone (no clean term).
A non-finite δ-gradient keeps the last finite δ and is counted on the device; a NaN that FreeLB's
backward already put into the parameter gradients makes the caller skip the optimiser step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from smart_core.config import MethodConfig
from smart_core.divergences import task_loss
from smart_core.dropout import RngState, replaying
from smart_core.perturbation import normalize_gradient, project_max_norm, sizes, uniform_init

EmbedFn = Callable[[], Tensor]  # () -> embedding-layer output (B, T, H) of the current batch, with graph
ForwardFn = Callable[[Tensor], Tensor]


def _init(
    x: Tensor, mask: Tensor, config: MethodConfig, generator: torch.Generator | None, project: bool
) -> Tensor:
    """The random start: U(−1, 1) scaled by `adv_init_mag`; PGD's is projected into its ball (Madry's
    random start inside the ε-ball), FreeLB's is not (its code does not project the initial δ)."""
    if config.adv_init_mag <= 0:
        return torch.zeros(x.shape, device=x.device, dtype=torch.float32)
    delta = uniform_init(x, mask, config.adv_init_mag, config.adv_norm, generator)
    return project_max_norm(delta, mask, config.adv_norm, config.adv_max_norm) if project else delta


def _step(
    delta: Tensor, grad: Tensor, mask: Tensor, config: MethodConfig, sign: bool = False
) -> tuple[Tensor, Tensor]:
    """(the stepped and projected δ, whether the gradient was finite); a non-finite one keeps δ."""
    grad = grad.float()
    finite = torch.isfinite(grad).all()
    if sign:
        direction = grad.sign()
    else:
        direction = normalize_gradient(grad, "example-l2" if config.adv_norm == "l2" else "example-inf")
    stepped = project_max_norm(
        delta.detach() + config.adv_lr * direction, mask, config.adv_norm, config.adv_max_norm
    )
    return torch.where(finite, stepped, delta.detach()), finite


def freelb_loss(
    embed: EmbedFn,
    forward: ForwardFn,
    mask: Tensor,
    labels: Tensor,
    config: MethodConfig,
    regression: bool,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Returns (loss of step K / K with graph, components). Steps 1..K−1 were already back-propagated."""
    k = config.adv_steps
    # Every later step replays step 1's dropout masks: the generators before its embedding and before
    # its forward (the initial δ is drawn between the two).
    embed_rng = RngState.capture(mask.device)
    x = embed()
    delta = _init(x, mask, config, generator, project=False)
    forward_rng = RngState.capture(mask.device)
    total = torch.zeros((), device=x.device)
    first = torch.zeros((), device=x.device)
    finite = torch.ones((), dtype=torch.bool, device=x.device)
    for step in range(k):
        delta = delta.detach().requires_grad_(step < k - 1)
        if step > 0:
            with replaying(embed_rng):
                x = embed()  # the previous backward freed the embedding graph
        with replaying(forward_rng if step > 0 else None):
            loss = task_loss(forward(x + delta), labels, regression) / k
        total = total + loss.detach()
        if step == 0:
            first = loss.detach() * k
        if step == k - 1:
            break
        loss.backward()  # type: ignore[no-untyped-call]  # θ-grads accumulate over the K steps; δ.grad too
        assert delta.grad is not None  # δ requires grad on every step but the last
        delta, ok = _step(delta, delta.grad, mask, config)
        finite = finite & ok
    linf, l2 = sizes(delta)
    components = {"task_loss": first, "adv_loss": total, "delta_linf": linf, "delta_l2": l2}
    components["nonfinite_skips"] = (~finite).float()
    return loss, components


def pgd_loss(
    embed: EmbedFn,
    forward: ForwardFn,
    mask: Tensor,
    labels: Tensor,
    config: MethodConfig,
    regression: bool,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Returns (adversarial task loss with graph, components)."""
    x = embed()
    x_fixed = x.detach()
    delta = _init(x, mask, config, generator, project=True)
    finite = torch.ones((), dtype=torch.bool, device=x.device)
    for _ in range(config.adv_steps):
        delta = delta.detach().requires_grad_(True)
        inner = task_loss(forward(x_fixed + delta), labels, regression)
        (grad,) = torch.autograd.grad(inner, delta)  # input gradient only: no parameter .grad touched
        delta, ok = _step(delta, grad, mask, config, sign=config.adv_norm == "inf")
        finite = finite & ok
    loss = task_loss(forward(x + delta.detach()), labels, regression)
    linf, l2 = sizes(delta)
    components = {"task_loss": loss.detach(), "adv_loss": loss.detach(), "delta_linf": linf, "delta_l2": l2}
    components["nonfinite_skips"] = (~finite).float()
    return loss, components
