"""The linearised R_s (smart_core.linearized, issue 28) on a tiny random BERT under bf16 autocast, against the
model in float64 with the exact finite-difference R_s and no autocast.

Contract, at the paper's ε = σ = 1e-5 (ball), the `smart-renorm` preset and the `r3f` preset: R_s's value within
10% of fp64's, its parameter gradient at cosine >= 0.98, the ascent direction at cosine >= 0.95. The R_s these
tests read is the Objective's own (the task loss is switched off, so the backward is R_s's gradient alone).
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import smart_core.objective
from smart_core import MethodConfig, ModelFns, Objective, method_config
from smart_core.adversarial import exact_ascent_gradient
from smart_core.attention import LightAttention
from smart_core.divergences import task_loss
from smart_core.dropout import eval_mode
from smart_core.layer_norm import _LayerNorm
from smart_core.linearized import jvp, linear_ascent_gradient, linearized_regularizer, quadratic_divergence
from smart_core.perturbation import initial_noise

from . import reference as ref
from .op_count import OpCount

transformers = pytest.importorskip("transformers")
# The worker's split at the embedding-layer output; skipped where only smart_core is importable.
EmbeddingAdapter = pytest.importorskip("worker.training.adapter").EmbeddingAdapter

SETTINGS = {
    # rs_arithmetic auto: linearised under bf16 (the default, fp32, keeps the exact step until a GPU has
    # measured the linearised one's time and memory: docs/architecture.md §4)
    "ball": method_config(
        "smart-rs-only", rs_dropout="shared", rs_arithmetic="auto"
    ),  # ε = σ = 1e-5, ℓ∞ ball
    "renorm": method_config(
        "smart-renorm", mu=0.0, bregman="none", rs_dropout="shared", rs_arithmetic="auto"
    ),
    "r3f": method_config(
        "r3f", rs_dropout="shared", rs_arithmetic="auto"
    ),  # U(−σ, σ) on the words, no ascent
}
Batch = dict[str, Tensor]


def tiny_bert(
    dropout: float = 0.0, attention: str = "sdpa", num_labels: int = 3, attention_dropout: float = 0.0
) -> tuple[nn.Module, Batch]:
    """A random 2-layer BERT (H 64, 3 labels or 1 for regression; init std 0.1, so its layers are more than the
    identity) and a batch of 6 sequences of 16 tokens, two of them padded. `dropout`: the hidden layers';
    `attention_dropout`: the attention probabilities'."""
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        num_labels=num_labels, initializer_range=0.1, hidden_dropout_prob=dropout, attention_probs_dropout_prob=attention_dropout,
        attn_implementation=attention,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.BertForSequenceClassification(config).eval()
    ids = torch.randint(1, 100, (6, 16), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[:2, 11:] = 0
    return model, {"input_ids": ids * mask, "attention_mask": mask}


def regressing(model: nn.Module) -> bool:
    return bool(model.config.num_labels == 1)


def fns_for(model: nn.Module, batch: Batch, cfg: MethodConfig) -> ModelFns:
    adapter = EmbeddingAdapter(model, is_regression=regressing(model), site=cfg.perturb_site)
    return ModelFns(
        embed=lambda: adapter.embed(batch),
        forward=lambda e: adapter.forward_from_embeddings(batch, e),
        mask=batch["attention_mask"],
    )


@pytest.fixture
def r_s_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The Objective's task loss contributes nothing to the backward: what it computes is R_s's gradient."""
    monkeypatch.setattr(smart_core.objective, "task_loss", lambda out, labels, regression: out.sum() * 0.0)
    yield


def objective_r_s(
    model: nn.Module, batch: Batch, cfg: MethodConfig, autocast: bool
) -> tuple[Tensor, list[Tensor], dict[str, Tensor]]:
    """(R_s, its gradient for every parameter, the components) from one Objective call, ν from seed 1."""
    fns = fns_for(model, batch, cfg)
    regression = regressing(model)
    objective = Objective(
        cfg, regression=regression, module=model, generator=torch.Generator().manual_seed(1)
    )
    labels = torch.zeros(batch["input_ids"].shape[0], dtype=torch.float if regression else torch.long)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss, parts = objective(fns, labels)
    params = list(model.parameters())
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return (
        parts["r_s"],
        [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads, strict=True)],
        parts,
    )


def cosine(a: list[Tensor] | Tensor, b: list[Tensor] | Tensor) -> float:
    flat = lambda t: torch.cat([g.double().flatten() for g in ([t] if isinstance(t, Tensor) else t)])  # noqa: E731
    u, v = flat(a), flat(b)
    return (u @ v / (u.norm() * v.norm())).item()


def fp64_reference(model: nn.Module, batch: Batch, cfg: MethodConfig) -> tuple[Tensor, list[Tensor]]:
    """R_s and its parameter gradient with the model in float64: the exact finite difference, no autocast."""
    r_s, grads, parts = objective_r_s(
        copy.deepcopy(model).double(), batch, cfg.with_overrides(rs_arithmetic="fp32"), False
    )
    assert (
        parts["fp32_step"].item() == 0.0 and parts["linearized_step"].item() == 0.0
    )  # fp64: nothing to leave
    return r_s, grads


@pytest.mark.parametrize("num_labels", [3, 1], ids=["classification", "regression"])
@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_linearized_bf16_step_matches_fp64(setting: str, num_labels: int, r_s_only: None) -> None:
    """Classification's R_s is the symmetric KL's quadratic form, regression's (STS-B) the squared error's."""
    cfg = SETTINGS[setting]
    model, batch = tiny_bert(num_labels=num_labels)
    expected, expected_grads = fp64_reference(model, batch, cfg)
    r_s, grads, parts = objective_r_s(model, batch, cfg, autocast=True)
    assert parts["linearized_step"].item() == 1.0 and parts["fp32_step"].item() == 0.0
    assert expected.item() > 0
    assert abs(r_s.item() - expected.item()) <= 0.10 * expected.item(), (r_s.item(), expected.item())
    assert cosine(grads, expected_grads) >= 0.98


def _ascent_directions(cfg: MethodConfig, autocast: bool, num_labels: int = 3) -> tuple[Tensor, Tensor]:
    """(the linearised ascent gradient at ν under bf16 or fp32, the exact one at ν in float64)."""
    model, batch = tiny_bert(num_labels=num_labels)
    regression = regressing(model)
    fns = fns_for(model, batch, cfg)
    model64 = copy.deepcopy(model).double()
    fns64 = fns_for(model64, batch, cfg)
    x64 = fns64.embed().detach()
    nu = initial_noise(x64, fns64.mask, cfg.sigma, cfg.noise, torch.Generator().manual_seed(1))
    expected = exact_ascent_gradient(x64, nu, fns64.forward(x64).detach(), fns64.forward, regression)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        got = linear_ascent_gradient(fns.embed(), nu, None, fns.forward, regression)
    assert got.dtype == torch.float32 and got.shape == nu.shape
    return got, expected


@pytest.mark.parametrize("num_labels", [3, 1], ids=["classification", "regression"])
@pytest.mark.parametrize("setting", ["ball", "renorm"])
def test_linearized_ascent_direction_matches_fp64(setting: str, num_labels: int) -> None:
    got, expected = _ascent_directions(SETTINGS[setting], autocast=True, num_labels=num_labels)
    assert cosine(got, expected) >= 0.95
    # Per example ("sum"), at the exact gradient's scale: grad_norm "none" (renorm) uses its size.
    ratio = got.double().norm() / expected.norm()
    assert 0.9 < ratio.item() < 1.1, ratio.item()


def test_the_plain_bf16_difference_is_noise_at_the_papers_epsilon() -> None:
    """Why the linearisation exists: the exact gradient computed under bf16 points nowhere at σ = 1e-5."""
    cfg = SETTINGS["ball"]
    model, batch = tiny_bert()
    fns = fns_for(model, batch, cfg)
    _, expected = _ascent_directions(cfg, autocast=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        x = fns.embed().detach()
        nu = initial_noise(x, fns.mask, cfg.sigma, cfg.noise, torch.Generator().manual_seed(1))
        plain = exact_ascent_gradient(x, nu, fns.forward(x).detach(), fns.forward, False)
    assert cosine(plain, expected) < 0.5


def test_quadratic_form_is_the_divergence_to_second_order() -> None:
    """KL(p‖q) + KL(q‖p) = Δᵀ(diag p − p pᵀ)Δ + O(Δ³) per example; squared error is Δ² exactly."""
    g = torch.Generator().manual_seed(0)
    clean = torch.randn(5, 4, generator=g, dtype=torch.float64) * 2
    direction = torch.randn(5, 4, generator=g, dtype=torch.float64)
    for size in (1e-2, 1e-3):
        moved = direction * size
        exact = ref.sym_kl(clean + moved, clean)
        approx = quadratic_divergence(clean, moved, regression=False)
        assert abs(approx.item() - exact.item()) <= 3 * size * exact.item()  # the cubic term
    p = ref.softmax64(clean)
    fisher = torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)  # (B, C, C)
    per_example = torch.einsum("bi,bij,bj->b", direction, fisher, direction)
    torch.testing.assert_close(
        quadratic_divergence(clean, direction, regression=False, reduction="none"), per_example
    )
    torch.testing.assert_close(
        quadratic_divergence(clean, direction, regression=False, reduction="sum"), per_example.sum()
    )
    a, d = torch.randn(6, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    torch.testing.assert_close(quadratic_divergence(a, d, regression=True), ref.squared(a + d, a))
    with pytest.raises(ValueError, match="quadratic form"):
        quadratic_divergence(clean, direction[:, :3], regression=False)


def test_jvp_gives_the_clean_forward_and_the_directional_derivative() -> None:
    model, batch = tiny_bert()
    model = model.double()
    fns = fns_for(model, batch, SETTINGS["ball"])
    x = fns.embed()
    direction = torch.randn(x.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 1e-5
    clean, moved = jvp(fns.forward, x, direction)
    torch.testing.assert_close(clean, fns.forward(x))
    h = 1e2  # a central difference at 1e-3 per element: float64 resolves it, its cubic term is ~1e-6
    central = (fns.forward(x + h * direction) - fns.forward(x - h * direction)) / (2 * h)
    torch.testing.assert_close(moved.double(), central, rtol=1e-4, atol=1e-12)
    assert clean.grad_fn is not None and moved.grad_fn is not None  # both carry the weights' graph


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_dual_tensors_and_the_functorch_transform_agree(attention: str) -> None:
    """The two JVP mechanisms (dual tensors in eager mode, `torch.func.jvp` for a compiled module) give the same
    primal, tangent and gradients through the tangent, bf16 autocast and layer norm's own formula included."""
    model, batch = tiny_bert(attention=attention)
    fns = fns_for(model, batch, SETTINGS["ball"])
    x = fns.embed().detach().requires_grad_(True)
    direction = torch.randn(x.shape, generator=torch.Generator().manual_seed(2)) * 1e-5
    results = []
    for dual in (True, False):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            clean, moved = jvp(fns.forward, x, direction, dual=dual)
        value = quadratic_divergence(clean, moved, regression=False)
        results.append(
            (clean, moved, torch.autograd.grad(value, [x, *model.parameters()], allow_unused=True))
        )
    (clean_a, moved_a, grads_a), (clean_b, moved_b, grads_b) = results
    torch.testing.assert_close(clean_a, clean_b, rtol=0, atol=0)
    torch.testing.assert_close(moved_a, moved_b, rtol=1e-5, atol=1e-12)
    assert cosine([g for g in grads_a if g is not None], [g for g in grads_b if g is not None]) >= 0.99999


def test_a_lost_tangent_is_an_error() -> None:
    """A compiled module drops a dual tensor's tangent; that must fail loudly, not read as a zero R_s."""
    x = torch.randn(2, 3)
    with pytest.raises(RuntimeError, match="dual=False"):
        jvp(lambda e: e.detach().sum(-1), x, torch.ones_like(x))


def test_runs_compiled_finds_a_compiled_submodule() -> None:
    model, _ = tiny_bert()
    assert not smart_core.objective.runs_compiled(model) and not smart_core.objective.runs_compiled(None)
    model.bert.encoder.compile()  # compiles lazily: nothing is traced here
    assert smart_core.objective.runs_compiled(model)
    wrapped, _ = tiny_bert()
    assert smart_core.objective.runs_compiled(nn.Sequential(torch.compile(wrapped)))


@pytest.mark.parametrize("compiled", [False, True])
def test_the_objective_takes_the_functorch_transform_for_a_compiled_model(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import smart_core.linearized

    model, batch = tiny_bert()
    seen: list[bool] = []
    inner = smart_core.linearized.jvp

    def spy(*args: object, dual: bool = True, **kwargs: object) -> tuple[Tensor, Tensor]:
        seen.append(dual)
        return inner(*args, dual=dual, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(smart_core.linearized, "jvp", spy)
    monkeypatch.setattr(smart_core.objective, "runs_compiled", lambda module: compiled)
    objective_r_s(model, batch, SETTINGS["ball"].with_overrides(diagnostics_every=0), autocast=True)
    assert seen == [not compiled] * 2  # the ascent's pass and the final one


def _train_mode_step(
    cfg: MethodConfig, attention: str, *, light: bool = False
) -> tuple[Tensor, list[Tensor], dict[str, Tensor]]:
    """One step with dropout in the hidden layers and the attention probabilities. `light`: SDPA runs as
    smart_core.attention, whose masks are other draws than SDPA's own (what a linearised step runs)."""
    model, batch = tiny_bert(dropout=0.2, attention=attention, attention_dropout=0.2)
    with LightAttention() if light else contextlib.nullcontext():
        return objective_r_s(model.train(), batch, cfg, autocast=False)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_shared_dropout_masks_survive_the_linearisation(attention: str, r_s_only: None) -> None:
    """In fp32 at ε = 1e-3 (resolved both ways), with dropout on: the linearised R_s is the exact `shared` R_s.
    Were the tangent or the ascent taken through other masks than the clean forward's, R_s would be the
    divergence between two dropout draws, orders of magnitude larger. The exact step runs SDPA as the linearised
    one does, so that both draw the same attention masks."""
    cfg = method_config("smart-rs-only", rs_dropout="shared", epsilon=1e-3, sigma=1e-3)
    expected, expected_grads, exact_parts = _train_mode_step(
        cfg.with_overrides(rs_arithmetic="fp32"), attention, light=True
    )
    r_s, grads, parts = _train_mode_step(cfg.with_overrides(rs_arithmetic="linearized"), attention)
    assert exact_parts["linearized_step"].item() == 0.0 and parts["linearized_step"].item() == 1.0
    torch.testing.assert_close(r_s, expected, rtol=0.02, atol=0)
    assert cosine(grads, expected_grads) >= 0.999


def test_the_shared_teacher_replays_the_linearised_passes_masks() -> None:
    """With dropout in the hidden layers and the attention probabilities: at the first step the teacher is the
    student, so `shared` D_Breg is 0 on both paths. The linearised step runs every forward through
    smart_core.attention, whose masks come from its own draws: a teacher through SDPA would replay the random
    state with other masks (D_Breg 0.15 here)."""
    cfg = method_config("smart", rs_dropout="shared", teacher_dropout="shared", epsilon=1e-3, sigma=1e-3)
    for arithmetic, linearized in (("fp32", 0.0), ("linearized", 1.0)):
        _, _, parts = _train_mode_step(cfg.with_overrides(rs_arithmetic=arithmetic), "sdpa")
        assert parts["linearized_step"].item() == linearized
        assert parts["d_breg"].item() < 1e-9, (arithmetic, parts["d_breg"])


def test_off_mode_is_linearised_in_eval_mode(r_s_only: None) -> None:
    cfg = SETTINGS["ball"].with_overrides(rs_dropout="off")
    model, batch = tiny_bert(dropout=0.2)
    model.train()
    expected, expected_grads = fp64_reference(model.eval(), batch, cfg)  # eval: what `off` compares
    r_s, grads, parts = objective_r_s(model.train(), batch, cfg, autocast=True)
    assert parts["linearized_step"].item() == 1.0 and model.training
    assert abs(r_s.item() - expected.item()) <= 0.10 * expected.item()
    assert cosine(grads, expected_grads) >= 0.98


@pytest.mark.parametrize(
    ("overrides", "fp32", "linearized"),
    [
        ({"rs_dropout": "independent"}, 1.0, 0.0),  # a second dropout draw: only the exact path says it
        ({"rs_arithmetic": "fp32"}, 1.0, 0.0),  # the default: the exact fp32 step
        ({}, 0.0, 1.0),  # auto
    ],
)
def test_which_path_ran_is_a_component(
    overrides: dict, fp32: float, linearized: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step says which path ran; a linearised step's forwards take smart_core's attention (its JVP passes
    need it), the exact step the model's own."""
    calls = 0
    inner = LightAttention.replacements[F.scaled_dot_product_attention]

    def counted(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        return inner(*args, **kwargs)

    monkeypatch.setitem(LightAttention.replacements, F.scaled_dot_product_attention, counted)
    model, batch = tiny_bert()
    _, _, parts = objective_r_s(model, batch, SETTINGS["ball"].with_overrides(**overrides), autocast=True)
    assert parts["fp32_step"].item() == fp32 and parts["linearized_step"].item() == linearized
    assert (calls > 0) == bool(linearized), calls


@pytest.mark.parametrize("overrides", [{}, {"rs_arithmetic": "auto"}], ids=["exact", "linearised"])
def test_the_ascent_runs_with_the_weights_frozen(overrides: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """The objective's ascent takes δ's gradient only, so it runs with no weight requiring grad (its graph
    keeps no activation for a weight's gradient); the step's own passes see them trainable again."""
    cfg = (
        SETTINGS["ball"].with_overrides(**overrides)
        if overrides
        else SETTINGS["ball"].with_overrides(rs_arithmetic="fp32")
    )
    model, batch = tiny_bert()
    seen: list[bool] = []
    for name in ("exact_ascent_gradient", "linear_ascent_gradient"):
        inner = getattr(smart_core.objective, name)

        def spy(*args: object, inner: object = inner, **kwargs: object) -> Tensor:
            seen.append(any(p.requires_grad for p in model.parameters()))
            return inner(*args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(smart_core.objective, name, spy)
    _, grads, parts = objective_r_s(model, batch, cfg, autocast=True)
    assert parts["linearized_step"].item() == (1.0 if overrides else 0.0)
    assert seen == [False]  # one ascent step, no weight trainable during it
    assert all(p.requires_grad for p in model.parameters())
    assert sum(g.abs().sum().item() for g in grads) > 0  # the outer pass still reaches the weights


def test_the_ascent_signal_runs_with_the_weights_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    """The diagnostics' ascent signal takes input gradients only, so no weight requires grad during it."""
    cfg = SETTINGS["ball"].with_overrides(rs_arithmetic="fp32", diagnostics_every=1)
    model, batch = tiny_bert()
    seen: list[bool] = []
    inner = smart_core.objective.ascent_signal

    def spy(*args: object) -> Tensor:
        seen.append(any(p.requires_grad for p in model.parameters()))
        return inner(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(smart_core.objective, "ascent_signal", spy)
    _, _, parts = objective_r_s(model, batch, cfg, autocast=False)
    assert seen == [False] and "ascent_signal" in parts
    assert all(p.requires_grad for p in model.parameters())


def test_linearized_refuses_independent_dropout() -> None:
    with pytest.raises(ValueError, match="independent"):
        method_config("smart", rs_arithmetic="linearized")
    method_config("smart", rs_arithmetic="linearized", rs_dropout="shared")
    method_config("vanilla", rs_arithmetic="linearized")  # no R_s: nothing to linearise


def _Casts() -> OpCount:
    return OpCount(torch.ops.aten._to_copy)


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_sharing_the_weight_casts_changes_nothing_but_the_casts(
    dropout: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A linearised bf16 step (ascent and R_s both JVP passes) with each linear weight cast once for its passes
    (smart_core.linear.casts_shared) computes bitwise what it computed with a cast per pass, R_s and every
    gradient, with 2 casts per linear layer (weight, bias) fewer: the final pass reuses the frozen ascent's
    casts. (`renorm` linearises its ascent only: its other passes take autocast's own cached casts.)"""
    model, batch = tiny_bert(dropout=dropout)
    layers = sum(isinstance(m, nn.Linear) for m in model.modules())

    def step() -> tuple[Tensor, list[Tensor], int]:
        torch.manual_seed(5)
        casts = _Casts()
        with casts:
            r_s, grads, _ = objective_r_s(model.train(), batch, SETTINGS["ball"], autocast=True)
        return r_s, grads, casts.count

    shared = step()
    monkeypatch.setattr(smart_core.objective, "casts_shared", lambda module: contextlib.nullcontext())
    per_pass = step()
    assert shared[0].item() > 0
    torch.testing.assert_close(shared[0], per_pass[0], rtol=0, atol=0)
    for a, b in zip(shared[1], per_pass[1], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert per_pass[2] - shared[2] == 2 * layers


def test_a_non_finite_ascent_skips_r_s_and_says_so() -> None:
    """An ascent gradient that is not finite leaves δ at zero, R_s at exactly 0 (not 0/0) and the batch counted as
    skipped; a finite one is not counted."""
    model, batch = tiny_bert()
    cfg = SETTINGS["ball"]
    fns = fns_for(model, batch, cfg)
    x = fns.embed().detach()

    def nan_gradient(x: Tensor, delta: Tensor, *_: object) -> Tensor:
        return torch.full_like(delta, float("nan"))

    results = {}
    for name, gradient in (("nan", nan_gradient), ("finite", linear_ascent_gradient)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            _, results[name] = linearized_regularizer(
                x, fns.forward, fns.mask, cfg, False, torch.Generator().manual_seed(1), gradient=gradient
            )
    skipped, kept = results["nan"], results["finite"]
    assert skipped.r_s.item() == 0.0 and skipped.skipped.item() == 1.0 and skipped.delta_linf.item() == 0.0
    assert kept.r_s.item() > 0.0 and kept.skipped.item() == 0.0


def test_the_quadratic_form_is_computed_in_fp32_from_bf16_logits() -> None:
    """The step's primal logits are bf16 under autocast: F = diag p − p pᵀ must come from them in fp32 (a bf16
    softmax is off by ~1e-3), and a bf16 Δ is promoted before it is squared."""
    g = torch.Generator().manual_seed(3)
    clean = (torch.randn(5, 4, generator=g) * 3).bfloat16()
    moved = torch.randn(5, 4, generator=g).bfloat16()
    for regression in (False, True):
        c, m = (clean, moved) if not regression else (clean[:, 0], moved[:, 0])
        got = quadratic_divergence(c, m, regression=regression, reduction="none")
        expected = quadratic_divergence(c.double(), m.double(), regression=regression, reduction="none")
        assert got.dtype == torch.float32
        torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("arithmetic", ["fp32", "linearized"])
def test_a_shared_step_consumes_the_random_stream_as_one_plain_forward_does(arithmetic: str) -> None:
    """Under `shared` the step's clean forward draws the masks and every other pass replays them: afterwards the
    stream is where one plain training forward leaves it, so the next step draws new masks (a final pass that
    replayed instead of drawing would repeat this step's masks at the next)."""
    cfg = method_config("smart-rs-only", rs_dropout="shared", rs_arithmetic=arithmetic, diagnostics_every=0)
    model, batch = tiny_bert(dropout=0.2)
    fns = fns_for(model.train(), batch, cfg)
    torch.manual_seed(7)
    fns.forward(fns.embed())
    expected = torch.get_rng_state()
    torch.manual_seed(7)
    objective = Objective(cfg, regression=False, module=model, generator=torch.Generator().manual_seed(1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, parts = objective(fns, torch.zeros(6, dtype=torch.long))
    assert parts["linearized_step"].item() == (arithmetic == "linearized")
    assert torch.equal(torch.get_rng_state(), expected)


def test_the_ascent_runs_the_fused_layer_norm_and_the_final_pass_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the final pass differentiates its tangent with respect to the weights, so only it needs
    smart_core.layer_norm's formula; the ascent's VJP (δ's gradient only) runs the fused kernel, fewer launches
    where the helpers run eager."""
    model, batch = tiny_bert()
    norms = sum(isinstance(m, nn.LayerNorm) for m in model.modules())
    fns = fns_for(model, batch, SETTINGS["ball"])
    calls = 0
    inner = _LayerNorm.apply

    def counted(*args: object) -> object:
        nonlocal calls
        calls += 1
        return inner(*args)

    monkeypatch.setattr(_LayerNorm, "apply", counted)
    x = fns.embed().detach()
    nu = torch.randn(x.shape, generator=torch.Generator().manual_seed(2)) * 1e-5
    with torch.autocast("cpu", dtype=torch.bfloat16):
        linear_ascent_gradient(x, nu, None, fns.forward, False)
        assert calls == 0
        jvp(fns.forward, x, nu)
    assert calls == norms  # the perturbed input enters before the embeddings' norm


def test_without_a_generator_of_its_own_the_noise_leaves_the_replayed_masks_alone() -> None:
    """With no generator of its own the objective draws ν from the global stream: before the masks' state is
    taken, so the ascent replays exactly the masks the final pass (the clean forward) then draws. Drawn after,
    ν's draws would shift the final pass's masks off the ascent's."""
    cfg = method_config("smart-rs-only", rs_dropout="shared", rs_arithmetic="linearized", diagnostics_every=0)
    model, batch = tiny_bert(dropout=0.2)
    seen: dict[nn.Module, list[Tensor]] = {}

    def record(module: nn.Module, inputs: object, output: Tensor) -> None:
        seen.setdefault(module, []).append((output == 0).clone())

    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.register_forward_hook(record)
    fns = fns_for(model.train(), batch, cfg)
    torch.manual_seed(0)
    _, parts = Objective(cfg, regression=False, module=model)(fns, torch.zeros(6, dtype=torch.long))
    assert parts["linearized_step"].item() == 1.0
    assert all(len(masks) in (2, 3) for masks in seen.values())  # (the embeddings' also runs before the step)
    passes = [masks[-2:] for masks in seen.values()]  # the ascent's, then the final pass's
    assert all(masks[0].any() and torch.equal(masks[0], masks[1]) for masks in passes)


def test_under_off_the_task_loss_comes_from_the_training_forward() -> None:
    """`off` measures R_s between eval-mode forwards, but the step still trains on the clean forward with dropout:
    the linearised step's task loss is that of a plain training forward drawing the same masks (fp32: to
    rounding), not the eval-mode pass's (6% away here)."""
    cfg = SETTINGS["ball"].with_overrides(rs_dropout="off", rs_arithmetic="linearized", diagnostics_every=0)
    model, batch = tiny_bert(dropout=0.2)
    fns = fns_for(model.train(), batch, cfg)
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    torch.manual_seed(4)
    expected = task_loss(fns.forward(fns.embed()), labels, False).detach()
    with eval_mode(model):
        without_dropout = task_loss(fns.forward(fns.embed()), labels, False).detach()
    torch.manual_seed(4)
    objective = Objective(cfg, regression=False, module=model, generator=torch.Generator().manual_seed(1))
    _, parts = objective(fns, labels)
    assert parts["linearized_step"].item() == 1.0 and model.training
    torch.testing.assert_close(parts["task_loss"], expected, rtol=1e-5, atol=0)
    assert abs(without_dropout - expected) > 0.01 * expected
