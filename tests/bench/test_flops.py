"""bench.flops: a SMART step's matmul FLOPs by dtype, the tensor-core check CI runs without a GPU (issue 28)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tests.smart_core.test_linearized as lin
from bench.flops import DtypeFlops, method_bf16_share, method_flops

CPU = torch.device("cpu")
LABELS = torch.tensor([0, 1, 2, 0, 1, 2])  # tiny_bert's 6 sequences, 3 labels


def test_counts_matmuls_and_attention_by_dtype() -> None:
    a, b = torch.randn(4, 8), torch.randn(8, 5)
    q = torch.randn(2, 3, 16, 8)
    counter = DtypeFlops()
    with counter:
        a @ b  # 2·4·8·5 = 320
        a.bfloat16() @ b.bfloat16()
        F.scaled_dot_product_attention(q, q, q)  # the CPU flash kernel: 4·(2·3)·16·16·8 = 49152
        a + 1.0  # elementwise: not counted
    assert counter.flops == {torch.float32: 320 + 49152, torch.bfloat16: 320}
    assert counter.share(torch.bfloat16) == pytest.approx(320 / (2 * 320 + 49152))
    assert DtypeFlops().share(torch.bfloat16) == 0.0


def test_counts_launches_and_syncs_but_not_views() -> None:
    a = torch.randn(4, 8)
    counter = DtypeFlops()
    with counter:
        b = a.t().reshape(8, 4).detach()  # views and a detach: no kernel
        c = (b * 2.0).sum()  # two kernels
        c.item()  # a scalar read: a sync, no launch
    assert (counter.launches, counter.syncs) == (2, 1)


@pytest.mark.parametrize(
    "method",
    [
        "smart+rs_dropout=shared+rs_arithmetic=auto",  # ball, ε = σ = 1e-5: the ascent and R_s linearised
        "smart-renorm+rs_dropout=shared+rs_arithmetic=auto",  # the ascent at σ = 1e-5 linearised, R_s at δ ~ 1 plain
        "r3f+rs_dropout=shared+rs_arithmetic=auto",  # no ascent: R_s linearised
        "smart+rs_dropout=off+rs_arithmetic=auto",
    ],
)
def test_a_linearised_step_runs_its_matmuls_at_bf16(method: str) -> None:
    model, batch = lin.tiny_bert(dropout=0.1)
    assert method_bf16_share(model.train(), method, batch, LABELS, CPU) >= 0.9


@pytest.mark.parametrize(
    "method",
    [
        "smart+rs_arithmetic=auto",
        "smart+rs_dropout=shared",
        "r3f+rs_dropout=shared",
    ],  # independent; fp32, the default
)
def test_the_exact_step_runs_its_matmuls_at_fp32(method: str) -> None:
    model, batch = lin.tiny_bert(dropout=0.1)
    assert method_bf16_share(model.train(), method, batch, LABELS, CPU) <= 0.1


def test_vanilla_runs_at_bf16_and_the_model_is_left_alone() -> None:
    model, batch = lin.tiny_bert(dropout=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    assert method_bf16_share(model, "vanilla", batch, LABELS, CPU) == 1.0
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters())


def test_a_linearised_step_costs_about_the_passes_it_needs() -> None:
    """Matmul FLOPs per step over vanilla's (3 forwards' worth), diagnostics off, on the tiny BERT: the exact
    step's passes are 9 forwards (clean, ascent forward and backward, perturbed, the backward through both,
    the teacher); the linearised step's 10 (two JVP passes of 2, the ascent's backward through the tangent,
    the final pass's backward through primal and tangent, the teacher) plus attention's recomputation.
    Before smart_core.linear, each JVP pass multiplied the weights' zero tangent too: 4.4x here."""
    model, batch = lin.tiny_bert(dropout=0.1)
    total = {m: method_flops(model.train(), m, batch, LABELS, CPU).total() for m in (
        "vanilla", "smart+rs_dropout=shared+diagnostics_every=0",
        "smart+rs_dropout=shared+rs_arithmetic=auto+diagnostics_every=0")}  # fmt: skip
    exact, linear = (total[m] / total["vanilla"] for m in list(total)[1:])
    assert exact == pytest.approx(3.0, abs=0.05)
    assert 10 / 3 <= linear <= 3.7, linear


def test_kernel_launches_per_step_stay_where_they_were_measured() -> None:
    """The launch count is what a launch-bound GPU step's time follows (an H200 at MiniLM-L6 x 128, batch 32:
    time ratios 2.9x exact, 12.0x linearised, 1.4x the teacher, against launch ratios 2.18x, 9.34x and 1.29x
    counted on CPU for the same shape and code at a step without diagnostics: docs/benchmarks.md). On the tiny
    BERT, diagnostics off: the exact step 2.7x vanilla's, the linearised 8.3x, the teacher alone 1.5x. A change
    that adds launches to a step shows here before it costs GPU time."""
    model, batch = lin.tiny_bert(dropout=0.1)
    launches = {m: method_flops(model.train(), m, batch, LABELS, CPU).launches for m in (
        "vanilla", "smart+rs_dropout=shared+diagnostics_every=0",
        "smart+rs_dropout=shared+rs_arithmetic=auto+diagnostics_every=0", "smart-breg-only")}  # fmt: skip
    exact, linear, teacher = (launches[m] / launches["vanilla"] for m in list(launches)[1:])
    assert 2.0 <= exact <= 3.0, exact
    assert 5.0 <= linear <= 9.0, linear
    assert 1.0 < teacher <= 1.6, teacher


def test_helper_calls_count_as_one_region_each() -> None:
    """Under the counter smart_core.fused's helpers run eager; their launches and calls are counted apart, so
    `regions()` is the step as a GPU runs it with them compiled: fewer launches for the linearised step, the
    same for vanilla (which calls none)."""
    model, batch = lin.tiny_bert(dropout=0.1)
    vanilla = method_flops(model.train(), "vanilla", batch, LABELS, CPU)
    linear = method_flops(
        model.train(), "smart+rs_dropout=shared+rs_arithmetic=auto+diagnostics_every=0", batch, LABELS, CPU
    )
    assert (vanilla.helper_calls, vanilla.helper_launches, vanilla.regions()) == (0, 0, vanilla.launches)
    assert 0 < linear.helper_calls < linear.helper_launches < linear.launches
    assert linear.regions() == linear.launches - linear.helper_launches + linear.helper_calls
    assert linear.regions() / vanilla.regions() < 0.7 * linear.launches / vanilla.launches


def test_a_step_is_counted_with_its_diagnostics_after_no_update_and_without_them_after_one() -> None:
    """A fresh objective's first step runs SMART's diagnostics (every `diagnostics_every` updates, from 0):
    `updates_done=1` counts the step the other nine of ten are, the one a median step time sees."""
    model, batch = lin.tiny_bert(dropout=0.1)
    counts = {(m, done): method_flops(model.train(), m, batch, LABELS, CPU, updates_done=done).launches
              for m in ("vanilla", "smart", "smart+diagnostics_every=0") for done in (0, 1)}  # fmt: skip
    assert counts["vanilla", 0] == counts["vanilla", 1]
    assert counts["smart", 0] > 1.5 * counts["smart", 1]  # R_s at δ = 0 and the ascent signal: four passes
    assert (
        counts["smart", 1] == counts["smart+diagnostics_every=0", 0] == counts["smart+diagnostics_every=0", 1]
    )
