"""FreeLB (Zhu et al. 2020, Algorithm 1) and PGD (Madry et al. 2018) against transcriptions of the papers."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from smart_core import ModelFns, Objective, freelb_loss, method_config, pgd_loss
from smart_core.config import MethodConfig

from . import reference as ref
from .toy import ToyEncoder, toy_batch


def _start(x: Tensor, mask: Tensor, cfg: MethodConfig, seed: int, project: bool) -> Tensor:
    """δ₀: U(−1, 1) on real tokens scaled to adv_init_mag (ℓ∞) or adv_init_mag/√(len·H) (ℓ2), FreeLB's
    init, drawn as the library draws it (fp32, from the given generator). PGD puts it inside the ball
    (Madry's random start); FreeLB's code does not project its initial δ."""
    if cfg.adv_init_mag <= 0:
        return torch.zeros(x.shape, dtype=torch.float64)
    u = torch.rand(x.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float32) * 2 - 1
    u = u.double() * mask.unsqueeze(-1)
    if cfg.adv_norm == "inf":
        delta = u * cfg.adv_init_mag
    else:
        delta = u * (cfg.adv_init_mag / torch.sqrt(mask.sum(1).double() * x.shape[-1])).view(-1, 1, 1)
    return _ball(delta, cfg) if project else delta


def _ball(delta: Tensor, cfg: MethodConfig) -> Tensor:
    if cfg.adv_max_norm <= 0:
        return delta
    return ref.project_example_ball(delta, "inf" if cfg.adv_norm == "inf" else "2", cfg.adv_max_norm)


def reference_freelb(
    model: ToyEncoder,
    ids: Tensor,
    mask: Tensor,
    labels: Tensor,
    cfg: MethodConfig,
    seed: int,
    regression: bool,
) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """Zhu et al. 2020, Algorithm 1 (the "free" large-batch adversarial loop), for one minibatch:
        δ₀ ← init;  g₀ ← 0
        for t = 1..K:
            g_t   ← g_{t−1} + (1/K) ∇_θ L(f(X + δ_{t−1}), y)
            g_adv ← ∇_δ L(f(X + δ_{t−1}), y)
            δ_t   ← Π_{‖δ‖ ≤ ε}(δ_{t−1} + α · g_adv / ‖g_adv‖)
        θ ← θ − τ g_K
    with the same dropout masks in all K forwards (the paper's Table 4: the RNG is reset before each).
    Returns (g_K per parameter, the K perturbed inputs X + δ_{t−1}, the K losses)."""
    params = list(model.parameters())
    loss_of = ref.loss_fn(regression)
    acc = [torch.zeros_like(p) for p in params]
    rng = torch.get_rng_state()
    x = model.embed(ids)
    delta = _start(x, mask, cfg, seed, project=False)
    inputs, losses = [], []
    for t in range(cfg.adv_steps):
        torch.set_rng_state(rng)
        x = model.embed(ids)
        delta = delta.detach().requires_grad_(True)
        inputs.append((x + delta).detach())
        loss = loss_of(model.from_embeddings(x + delta, mask), labels)
        losses.append(loss.detach())
        acc = [a + g / cfg.adv_steps for a, g in zip(acc, ref.grads(loss, params), strict=True)]
        (g_adv,) = torch.autograd.grad(loss, delta)
        norm = ref.example_norm(g_adv, "inf" if cfg.adv_norm == "inf" else "2")
        if t < cfg.adv_steps - 1:
            delta = _ball(delta.detach() + cfg.adv_lr * g_adv / norm, cfg) * mask.unsqueeze(-1)
    return acc, inputs, losses


FREELB = {
    "l2-projected": method_config("freelb", adv_steps=3, adv_lr=0.3, adv_init_mag=0.05, adv_max_norm=0.2),
    "inf-projected": method_config(
        "freelb", adv_steps=3, adv_lr=0.1, adv_init_mag=0.02, adv_max_norm=0.05, adv_norm="inf"
    ),
    # The initial δ (0.2) lies outside the ball (0.05): FreeLB's first forward sees it unprojected.
    "inf-init-outside": method_config(
        "freelb", adv_steps=2, adv_lr=0.01, adv_init_mag=0.2, adv_max_norm=0.05, adv_norm="inf"
    ),
    "preset": method_config("freelb"),  # K 3, α 0.1, no init, no projection
    "l2-k2-unprojected": method_config("freelb", adv_steps=2, adv_lr=0.2, adv_init_mag=0.1),
}


@pytest.mark.parametrize("dropout", [0.0, 0.2], ids=["no-dropout", "dropout"])
@pytest.mark.parametrize("name", sorted(FREELB))
def test_freelb_matches_algorithm_1(name: str, dropout: float) -> None:
    cfg = FREELB[name]
    regression = name == "l2-k2-unprojected"
    torch.manual_seed(0)
    model = ToyEncoder(outputs=1 if regression else 2, dropout=dropout).double()
    ids, mask, labels = toy_batch()
    targets = torch.linspace(0.0, 1.0, 8, dtype=torch.float64) if regression else labels
    torch.manual_seed(11)
    expected, inputs, losses = reference_freelb(model, ids, mask, targets, cfg, 5, regression)
    assert model.embedding.weight.grad is None
    seen: list[Tensor] = []

    def forward(e: Tensor) -> Tensor:
        seen.append(e.detach().clone())
        return model.from_embeddings(e, mask)

    torch.manual_seed(11)
    loss, parts = freelb_loss(
        lambda: model.embed(ids), forward, mask, targets, cfg, regression, torch.Generator().manual_seed(5)
    )
    loss.backward()
    assert len(seen) == cfg.adv_steps
    for got, want in zip(seen, inputs, strict=True):  # X + δ_{t−1} of every step, δ updated and projected
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    for p, g in zip(model.parameters(), expected, strict=True):  # (1/K) Σ_t ∇_θ L_t, accumulated in .grad
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-9)
    last = inputs[-1] - model.embed(ids).detach() if dropout == 0 else None
    if last is not None:  # the final δ's sizes
        torch.testing.assert_close(parts["delta_linf"].double(), last.abs().max(), rtol=1e-5, atol=1e-9)
        torch.testing.assert_close(
            parts["delta_l2"].double(), ref.example_norm(last, "2").mean(), rtol=1e-5, atol=1e-9
        )
    torch.testing.assert_close(parts["task_loss"], losses[0], rtol=1e-6, atol=0)  # the first step's loss
    torch.testing.assert_close(parts["adv_loss"], torch.stack(losses).mean(), rtol=1e-6, atol=0)
    torch.testing.assert_close(loss.detach(), losses[-1] / cfg.adv_steps, rtol=1e-6, atol=0)
    assert parts["nonfinite_skips"].item() == 0.0
    if cfg.adv_max_norm > 0 and last is not None:  # steps larger than the radius: δ ends on its sphere
        norms = ref.example_norm(last, "inf" if cfg.adv_norm == "inf" else "2")
        torch.testing.assert_close(norms.max().item(), cfg.adv_max_norm, rtol=1e-6, atol=0)


def test_freelb_shares_dropout_masks_across_its_k_steps() -> None:
    """δ stays 0 (no init, α 0): under dropout the K forwards see the same masks, so all K are identical;
    the random stream then continues as after the first step alone."""
    torch.manual_seed(0)
    model = ToyEncoder(dropout=0.5)
    model.train()
    ids, mask, labels = toy_batch()
    cfg = method_config("freelb", adv_steps=4, adv_lr=0.0, adv_init_mag=0.0)
    embeds: list[Tensor] = []
    outputs: list[Tensor] = []

    def embed() -> Tensor:
        embeds.append(model.embed(ids))
        return embeds[-1]

    def forward(e: Tensor) -> Tensor:
        outputs.append(model.from_embeddings(e, mask))
        return outputs[-1]

    torch.manual_seed(3)
    loss, parts = freelb_loss(embed, forward, mask, labels, cfg, False)
    after = torch.rand(4)
    assert len(embeds) == len(outputs) == 4
    for e, o in zip(embeds[1:], outputs[1:], strict=True):
        assert torch.equal(e, embeds[0]) and torch.equal(o, outputs[0])
    torch.testing.assert_close(parts["adv_loss"], parts["task_loss"])
    torch.testing.assert_close(loss.detach() * 4, parts["task_loss"])
    torch.manual_seed(3)
    first = model.from_embeddings(model.embed(ids), mask)
    assert torch.equal(first, outputs[0])
    assert torch.equal(torch.rand(4), after)
    assert not torch.equal(model.from_embeddings(model.embed(ids), mask), first)  # dropout is on


class _NanGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: object, x: Tensor) -> Tensor:  # noqa: ARG004
        return x.clone()

    @staticmethod
    def backward(ctx: object, grad: Tensor) -> Tensor:  # noqa: ARG004
        return grad * float("nan")


@pytest.mark.parametrize("method", ["freelb", "pgd"])
def test_non_finite_delta_gradient_keeps_the_last_delta_and_is_counted(method: str) -> None:
    torch.manual_seed(0)
    model = ToyEncoder()
    ids, mask, labels = toy_batch()
    cfg = method_config(method, adv_steps=3, adv_init_mag=0.1, adv_max_norm=0.0)
    seen: list[Tensor] = []

    def forward(e: Tensor) -> Tensor:
        seen.append(e.detach().clone())
        return model.from_embeddings(_NanGrad.apply(e) if len(seen) == 1 else e, mask)

    fn = freelb_loss if method == "freelb" else pgd_loss
    _, parts = fn(
        lambda: model.embed(ids), forward, mask, labels, cfg, False, torch.Generator().manual_seed(1)
    )
    assert torch.equal(seen[1], seen[0])  # the NaN step kept δ₀
    assert not torch.equal(seen[2], seen[1])  # later finite steps move on
    assert parts["nonfinite_skips"].item() == 1.0
    assert torch.isfinite(parts["delta_l2"])
    objective = Objective(cfg, regression=False)
    seen.clear()
    objective(ModelFns(lambda: model.embed(ids), forward, mask), labels)
    seen.clear()
    objective(ModelFns(lambda: model.embed(ids), forward, mask), labels)
    assert objective.nonfinite_skips == 2


def reference_pgd(
    model: ToyEncoder,
    ids: Tensor,
    mask: Tensor,
    labels: Tensor,
    cfg: MethodConfig,
    seed: int,
    regression: bool,
) -> tuple[Tensor, list[Tensor]]:
    """Madry et al. 2018: a random start in the ε-ball, K steps of projected gradient ascent on the task
    loss w.r.t. the input only, δ ← Π(δ + α·sign(∇_δ L)) for ℓ∞ and Π(δ + α·∇_δ L/‖∇_δ L‖₂) for ℓ2, then
    the training loss L(f(X + δ_K), y) alone. Returns (that loss with graph, the K + 1 perturbed inputs)."""
    loss_of = ref.loss_fn(regression)
    x = model.embed(ids)
    delta = _start(x, mask, cfg, seed, project=True)
    inputs = []
    for _ in range(cfg.adv_steps):
        delta = delta.detach().requires_grad_(True)
        inputs.append((x + delta).detach())
        (g,) = torch.autograd.grad(loss_of(model.from_embeddings(x.detach() + delta, mask), labels), delta)
        if cfg.adv_norm == "inf":
            step = torch.sign(g)
        else:
            step = g / ref.example_norm(g, "2")
        delta = _ball(delta.detach() + cfg.adv_lr * step, cfg) * mask.unsqueeze(-1)
    inputs.append((x + delta).detach())
    return loss_of(model.from_embeddings(x + delta, mask), labels), inputs


PGD = {
    "preset-l2": method_config("pgd"),  # K 3, α 0.04, init 0.64, ‖δ‖₂ ≤ 0.4
    "l2-large-steps": method_config("pgd", adv_lr=0.5, adv_init_mag=0.1, adv_max_norm=0.3),
    "inf": method_config("pgd", adv_norm="inf", adv_lr=0.02, adv_init_mag=0.03, adv_max_norm=0.05),
    "inf-unprojected": method_config("pgd", adv_norm="inf", adv_steps=2, adv_lr=0.01, adv_max_norm=0.0),
}


@pytest.mark.parametrize("name", sorted(PGD))
def test_pgd_matches_madry(name: str) -> None:
    cfg = PGD[name]
    regression = name == "inf-unprojected"
    torch.manual_seed(0)
    model = ToyEncoder(outputs=1 if regression else 2).double()
    ids, mask, labels = toy_batch()
    targets = torch.linspace(0.0, 1.0, 8, dtype=torch.float64) if regression else labels
    expected, inputs = reference_pgd(model, ids, mask, targets, cfg, 5, regression)
    params = list(model.parameters())
    want = ref.grads(expected, params)
    seen: list[Tensor] = []

    def forward(e: Tensor) -> Tensor:
        seen.append(e.detach().clone())
        return model.from_embeddings(e, mask)

    fns = ModelFns(lambda: model.embed(ids), forward, mask)
    objective = Objective(cfg, regression=regression, generator=torch.Generator().manual_seed(5))
    loss, parts = objective(fns, targets)
    assert all(p.grad is None for p in params)  # the ascent touched no parameter gradient
    loss.backward()
    assert len(seen) == cfg.adv_steps + 1
    for got, exp in zip(seen, inputs, strict=True):
        torch.testing.assert_close(got, exp, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=0)
    for p, g in zip(params, want, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-8)
    # Trained on the adversarial loss alone: the clean loss is something else.
    clean = ref.loss_fn(regression)(model.from_embeddings(model.embed(ids), mask), targets)
    assert abs(clean.item() - loss.item()) > 1e-4 * abs(clean.item())
    torch.testing.assert_close(parts["adv_loss"], expected.detach(), rtol=1e-6, atol=0)
    torch.testing.assert_close(parts["task_loss"], expected.detach(), rtol=1e-6, atol=0)
    delta = inputs[-1] - inputs[0] + (inputs[0] - model.embed(ids).detach())
    torch.testing.assert_close(parts["delta_linf"].double(), delta.abs().max(), rtol=1e-5, atol=1e-9)
    torch.testing.assert_close(
        parts["delta_l2"].double(), ref.example_norm(delta, "2").mean(), rtol=1e-5, atol=1e-9
    )
    if cfg.adv_max_norm > 0:
        assert ref.example_norm(delta, cfg.adv_norm.replace("l2", "2")).max() <= cfg.adv_max_norm * (1 + 1e-6)
    assert parts["nonfinite_skips"].item() == 0.0 and objective.nonfinite_skips == 0
