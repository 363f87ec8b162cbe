"""Device and dtype plumbing without an accelerator: the `meta` device stands in for a GPU (a tensor there
cannot silently mix with a full-size CPU tensor), fakes stand in for the CUDA generator, and a float64
default dtype shows which tensors are pinned to fp32."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch
from torch import Tensor

import smart_core
import smart_core.bregman
from smart_core import (
    MethodConfig,
    ModelFns,
    Objective,
    ProximalReference,
    method_config,
    smoothness_regularizer,
)
from smart_core.baselines import _init
from smart_core.dropout import RngState, replaying
from smart_core.perturbation import (
    gaussian_init,
    initial_noise,
    normalize_gradient,
    project,
    project_max_norm,
    uniform_init,
)

from .toy import ToyEncoder, toy_batch

META = torch.device("meta")


def _meta_model() -> tuple[ToyEncoder, Tensor, Tensor, Tensor]:
    model = ToyEncoder().to(META)
    ids, mask, labels = toy_batch()
    return model, ids.to(META), mask.to(META), labels.to(META)


def test_perturbations_live_on_the_embeddings_device() -> None:
    like = torch.zeros(3, 4, 5, device=META)
    cpu_mask = torch.ones(3, 4, dtype=torch.long)  # a mask left on the host is moved, not mixed
    for noise in ("normal", "uniform"):
        assert initial_noise(like, cpu_mask, 0.1, noise).device == META  # type: ignore[arg-type]
    assert gaussian_init(like, cpu_mask, 0.1).device == META
    for norm in ("inf", "l2"):
        assert uniform_init(like, cpu_mask, 0.5, norm).device == META
        assert project_max_norm(like, cpu_mask, norm, 0.3).device == META
        assert project_max_norm(like, cpu_mask, norm, 0.0).device == META
    for rule, p in (("ball", "inf"), ("ball", "2"), ("renorm", "inf"), ("renorm", "2")):
        assert project(like, cpu_mask, rule, p, 0.1, 1e-6).device == META  # type: ignore[arg-type]
    assert normalize_gradient(like, "example-inf").device == META
    cfg = method_config("pgd")
    assert _init(like, cpu_mask, cfg, None, project=True).device == META
    assert _init(like, cpu_mask, cfg.with_overrides(adv_init_mag=0.0), None, project=True).device == META


@pytest.mark.parametrize("steps", [0, 1, 2])
def test_regulariser_results_stay_on_the_device(steps: int) -> None:
    model, ids, mask, _ = _meta_model()
    x = model.embed(ids)
    forward = lambda e: model.from_embeddings(e, mask)  # noqa: E731
    cfg = MethodConfig(ascent_steps=steps, epsilon=1e-3)
    result = smoothness_regularizer(x, forward(x), forward, mask, cfg, False)
    for name in ("r_s", "delta_linf", "delta_l2", "step_to_noise", "skipped"):
        assert getattr(result, name).device == META, name


@pytest.mark.parametrize("method", ["freelb", "pgd"])
@pytest.mark.parametrize("steps", [1, 3])
@pytest.mark.parametrize("init", [0.0, 0.5])
def test_baseline_components_stay_on_the_device(method: str, steps: int, init: float) -> None:
    model, ids, mask, labels = _meta_model()
    objective = Objective(method_config(method, adv_steps=steps, adv_init_mag=init), regression=False)
    loss, parts = objective(model.fns(ids, mask), labels)
    assert loss.device == META
    for name, value in parts.items():
        assert value.device == META, name


def test_default_dtype_does_not_leak_into_the_perturbation() -> None:
    """δ and ν are fp32 by contract, also when a program sets torch's default dtype to float64."""
    like = torch.zeros(2, 3, 4)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        for noise in ("normal", "uniform"):
            assert initial_noise(like, mask, 0.1, noise).dtype == torch.float32  # type: ignore[arg-type]
        assert gaussian_init(like, mask, 0.1).dtype == torch.float32
        for norm in ("inf", "l2"):
            assert uniform_init(like, mask, 0.5, norm).dtype == torch.float32
        assert _init(like, mask, method_config("freelb"), None, project=False).dtype == torch.float32
        assert _init(like, mask, method_config("pgd"), None, project=True).dtype == torch.float32
    finally:
        torch.set_default_dtype(before)


def test_rng_state_carries_the_accelerator_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple] = []
    saved = torch.tensor([7, 8, 9], dtype=torch.uint8)

    def get_rng_state(device: object = "cuda") -> Tensor:
        calls.append(("get", device))
        return saved.clone()

    def set_rng_state(state: Tensor, device: object = "cuda") -> None:
        calls.append(("set", state, device))

    monkeypatch.setattr(torch.cuda, "get_rng_state", get_rng_state)
    monkeypatch.setattr(torch.cuda, "set_rng_state", set_rng_state)
    device = torch.device("cuda", 1)
    state = RngState.capture(device)
    assert calls == [("get", device)] and state.device == device
    assert state.accelerator is not None and torch.equal(state.accelerator, saved)
    assert torch.equal(state.cpu, torch.get_rng_state())
    calls.clear()
    state.restore()
    assert len(calls) == 1 and calls[0][0] == "set" and calls[0][2] == device
    assert torch.equal(calls[0][1], saved)
    calls.clear()
    with replaying(state):
        pass
    assert [c[0] for c in calls] == ["get", "set", "set"]  # now; the saved state; now again
    assert all(c[-1] == device for c in calls)
    calls.clear()
    assert RngState.capture(torch.device("cpu")).accelerator is None and calls == []


def test_teacher_forward_leaves_autocast_uncached_on_the_parameters_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[torch.device] = []

    @contextlib.contextmanager
    def spy(device: torch.device) -> Iterator[None]:
        seen.append(device)
        yield

    monkeypatch.setattr(smart_core.bregman, "uncached_autocast", spy)
    model, ids, mask, _ = _meta_model()
    reference = ProximalReference(model, MethodConfig(), planned_updates=10)
    out = reference.outputs(lambda: model.from_embeddings(model.embed(ids), mask))
    assert out.device == META and seen == [META]


def test_a_reference_without_trainable_parameters_still_answers() -> None:
    model = torch.nn.Linear(3, 2)
    for p in model.parameters():
        p.requires_grad_(False)
    reference = ProximalReference(model, MethodConfig(), planned_updates=10)
    x = torch.ones(4, 3)
    assert reference.shadow == [] and torch.equal(reference.outputs(lambda: model(x)), model(x))
    reference.after_update()  # nothing to refresh: no error
    assert reference.updates_done == 1


def test_public_api_resolves_lazily() -> None:
    from smart_core import adversarial, baselines, config, divergences, objective

    modules = {
        "adversarial": adversarial,
        "baselines": baselines,
        "bregman": smart_core.bregman,
        "config": config,
        "divergences": divergences,
        "objective": objective,
    }
    for name in smart_core.__all__:
        module = modules[smart_core._EXPORTS[name]]
        assert getattr(smart_core, name) is getattr(module, name), name
    assert ModelFns is objective.ModelFns
    with pytest.raises(AttributeError, match="no attribute 'frobnicate'"):
        smart_core.frobnicate  # noqa: B018


def test_a_float_mask_does_not_widen_the_perturbation() -> None:
    like = torch.zeros(2, 3, 4)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)  # e.g. an attention mask
    for noise in ("normal", "uniform"):
        assert initial_noise(like, mask, 0.1, noise).dtype == torch.float32  # type: ignore[arg-type]
    for rule, p in (("ball", "inf"), ("ball", "2"), ("renorm", "inf")):
        assert project(like + 1, mask, rule, p, 0.1, 1e-6).dtype == torch.float32  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["smart", "smart-renorm", "r3f", "smart-breg-only"])
@pytest.mark.parametrize("dropout", ["independent", "shared", "off"])
def test_smart_components_stay_on_the_device(
    name: str, dropout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing in a step's components is left on the host (the caller stacks them on the device). Autocast
    has no meta backend, so its two queries are stubbed out."""
    import smart_core.objective

    monkeypatch.setattr(smart_core.objective, "step_arithmetic", lambda device: None)
    monkeypatch.setattr(smart_core.bregman, "uncached_autocast", lambda device: contextlib.nullcontext())
    model, ids, mask, labels = _meta_model()
    overrides = {"diagnostics_every": 1}
    if name != "smart-breg-only":
        overrides |= {"rs_dropout": dropout, "sigma": 1e-3}
    if name.startswith("smart"):
        overrides["teacher_dropout"] = dropout
    objective = Objective(method_config(name, **overrides), regression=False, module=model, planned_updates=5)
    loss, parts = objective(model.fns(ids, mask), labels)
    assert loss.device == META
    for key, value in parts.items():
        assert value.device == META, key
