"""MethodConfig: the refusals (each naming its field), the coercions, the presets."""

from __future__ import annotations

from dataclasses import fields
from typing import get_args

import pytest

from smart_core import METHOD_PRESETS, MethodConfig, method_config
from smart_core.config import FIELD_ROLES, MIN_PERTURBATION, FieldRole, fields_with

REFUSED = [
    # The resolution floor: below 1e-5 fp32 cannot resolve the perturbation.
    ({"epsilon": 5e-6}, "^epsilon = 5e-06 "),
    ({"epsilon": 9.9e-6, "norm_p": "2"}, "^epsilon = "),
    ({"sigma": 1e-6}, "^sigma = 1e-06 "),
    ({"method": "r3f", "mu": 0.0, "ascent_steps": 0, "sigma": 1e-7}, "^sigma = "),
    # Overrides that would silently turn one method into another.
    ({"method": "vanilla", "lambda_s": 1.0, "mu": 0.0}, "lambda_s"),
    ({"method": "vanilla", "lambda_s": 0.0, "mu": 1.0, "bregman": "momentum"}, "mu"),
    ({"method": "freelb", "lambda_s": 0.5, "mu": 0.0}, "lambda_s"),
    ({"method": "pgd", "lambda_s": 0.0, "mu": 0.1, "bregman": "vanilla", "inner_updates": 2}, "mu"),
    ({"method": "r3f", "mu": 0.0, "ascent_steps": 1}, "ascent_steps"),
    ({"method": "r3f", "mu": 1.0, "bregman": "momentum", "ascent_steps": 0}, "mu"),
    # Plain range checks.
    ({"ascent_steps": -1}, "ascent_steps"),
    ({"diagnostics_every": -1}, "diagnostics_every"),
    ({"inner_updates": 0}, "inner_updates"),
    ({"method": "freelb", "lambda_s": 0.0, "mu": 0.0, "adv_steps": 0}, "adv_steps"),
    ({"method": "pgd", "lambda_s": 0.0, "mu": 0.0, "adv_steps": 0}, "adv_steps"),
    ({"bregman": "vanilla", "inner_updates": 1}, "no-op"),
    ({"beta_early": 1.5}, "beta_early"),
    ({"beta_late": -0.1}, "beta_late"),
    ({"beta_switch": 2.0}, "beta_switch"),
    ({"ascent_steps": 1.5}, "ascent_steps"),
    ({"adv_steps": 2.5}, "adv_steps"),
    ({"eta": "0.1"}, "eta"),
    ({"lambda_s": True}, "lambda_s"),
    ({"diagnostics_every": None}, "diagnostics_every"),
]
REFUSED += [
    ({name: -1.0}, name)
    for name in ("lambda_s", "mu", "epsilon", "sigma", "eta", "renorm_stabilizer", "adv_lr")
]
REFUSED += [
    ({name: "nonsense"}, name)
    for name in (
        "method",
        "projection",
        "grad_norm",
        "norm_p",
        "bregman",
        "adv_norm",
        "rs_dropout",
        "teacher_dropout",
        "noise",
        "perturb_site",
    )
]


@pytest.mark.parametrize(
    ("overrides", "field"), REFUSED, ids=[f"{f}-{i}" for i, (_, f) in enumerate(REFUSED)]
)
def test_refusals_name_the_field(overrides: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        MethodConfig(**overrides)


ACCEPTED = [
    {"epsilon": MIN_PERTURBATION, "sigma": MIN_PERTURBATION},  # the paper's values are the floor
    {"epsilon": 0.0, "sigma": 0.0},  # 0 is not "too small": it switches the perturbation off
    {"epsilon": 1e-6, "projection": "renorm"},  # ε is no radius under renorm
    {"epsilon": 1e-6, "ascent_steps": 0},  # no ascent: ε unused
    {"sigma": 1e-6, "lambda_s": 0.0},  # no R_s: σ unused
    {"method": "vanilla", "lambda_s": 0.0, "mu": 0.0, "bregman": "momentum"},
    {"method": "r3f", "mu": 0.0, "bregman": "momentum", "ascent_steps": 0, "sigma": 1e-6, "lambda_s": 0.0},
    {"method": "freelb", "lambda_s": 0.0, "mu": 0.0, "epsilon": 1e-9, "sigma": 1e-9},
    {"beta_early": 0.0, "beta_late": 1.0, "beta_switch": 1.0, "diagnostics_every": 0, "ascent_steps": 0},
    {"method": "freelb", "lambda_s": 0.0, "mu": 0.0, "adv_steps": 1},  # K = 1 is plain adversarial training
    {"method": "pgd", "lambda_s": 0.0, "mu": 0.0, "adv_steps": 1},
]


@pytest.mark.parametrize("overrides", ACCEPTED)
def test_accepted(overrides: dict) -> None:
    cfg = MethodConfig(**overrides)
    for name, value in overrides.items():
        assert getattr(cfg, name) == value


def test_whole_numbers_are_coerced_and_teacher_dropout_bools_mapped() -> None:
    cfg = MethodConfig(
        ascent_steps=2.0, inner_updates=3.0, bregman="vanilla", diagnostics_every=5.0, adv_steps=4.0
    )
    assert (cfg.ascent_steps, cfg.inner_updates, cfg.diagnostics_every, cfg.adv_steps) == (2, 3, 5, 4)
    assert all(
        type(v) is int for v in (cfg.ascent_steps, cfg.inner_updates, cfg.diagnostics_every, cfg.adv_steps)
    )
    assert type(MethodConfig(eta=1).eta) is int  # a float field keeps what it got; ints are numbers
    assert MethodConfig(teacher_dropout=True).teacher_dropout == "independent"
    assert MethodConfig(teacher_dropout=False).teacher_dropout == "off"
    assert MethodConfig(teacher_dropout="shared").teacher_dropout == "shared"
    assert MethodConfig().teacher_dropout == "off" and MethodConfig().rs_dropout == "independent"


def test_defaults_are_the_papers() -> None:
    cfg = MethodConfig()
    assert (cfg.method, cfg.lambda_s, cfg.mu, cfg.epsilon, cfg.sigma, cfg.eta) == (
        "smart",
        1.0,
        1.0,
        1e-5,
        1e-5,
        1e-3,
    )
    assert (cfg.ascent_steps, cfg.projection, cfg.grad_norm, cfg.norm_p) == (1, "ball", "example-inf", "inf")
    assert (cfg.bregman, cfg.inner_updates, cfg.beta_early, cfg.beta_late, cfg.beta_switch) == (
        "momentum",
        1,
        0.99,
        0.999,
        0.1,
    )
    assert (cfg.noise, cfg.perturb_site, cfg.diagnostics_every) == ("normal", "embedding-output", 10)


def test_uses_smoothness_and_bregman() -> None:
    assert MethodConfig().uses_smoothness and MethodConfig().uses_bregman
    assert not MethodConfig(lambda_s=0.0).uses_smoothness
    assert not MethodConfig(mu=0.0).uses_bregman and not MethodConfig(bregman="none").uses_bregman
    assert method_config("r3f").uses_smoothness and not method_config("r3f").uses_bregman
    for name in ("vanilla", "freelb", "pgd"):
        cfg = method_config(name)
        assert not cfg.uses_smoothness and not cfg.uses_bregman


def test_presets() -> None:
    for name in METHOD_PRESETS:
        cfg = method_config(name)
        assert cfg == MethodConfig(**METHOD_PRESETS[name])
    freelb = method_config("freelb")
    assert (freelb.adv_steps, freelb.adv_lr, freelb.adv_init_mag, freelb.adv_max_norm) == (3, 0.1, 0.0, 0.0)
    assert freelb.perturb_site == "word-embeddings"
    pgd = method_config("pgd")
    assert (pgd.adv_steps, pgd.adv_lr, pgd.adv_init_mag, pgd.adv_max_norm, pgd.adv_norm) == (
        3,
        0.04,
        0.64,
        0.4,
        "l2",
    )
    r3f = method_config("r3f")
    assert (r3f.noise, r3f.perturb_site, r3f.ascent_steps, r3f.lambda_s, r3f.sigma) == (
        "uniform",
        "word-embeddings",
        0,
        1.0,
        1e-5,
    )
    assert not r3f.uses_bregman
    renorm = method_config("smart-renorm")
    assert (renorm.projection, renorm.grad_norm) == ("renorm", "none")
    assert (
        not method_config("smart-rs-only").uses_bregman
        and not method_config("smart-breg-only").uses_smoothness
    )
    assert method_config("smart", epsilon=1e-3).epsilon == 1e-3  # overrides win


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown method 'smarter'.*freelb.*vanilla"):
        method_config("smarter")


def test_overrides_and_dict_round_trip() -> None:
    cfg = MethodConfig().with_overrides(epsilon=1e-3, rs_dropout="shared")
    assert cfg.epsilon == 1e-3 and cfg.rs_dropout == "shared" and cfg.mu == 1.0
    assert MethodConfig(**cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="epsilon"):
        cfg.with_overrides(epsilon=1e-6)


# Each field's role: which switch of a method makes it irrelevant (worker.contract.grid.canonical_method
# blanks by role). Written out here as the five tuples were when typed by hand in worker/contract/grid.py,
# with the fields declared since.
ROLES = {
    "method": ("method", "lambda_s", "mu"),
    "perturbation": ("sigma", "noise", "ascent_steps", "rs_dropout", "rs_arithmetic"),
    "ascent": ("epsilon", "eta", "projection", "grad_norm", "norm_p", "renorm_stabilizer"),
    "site": ("perturb_site",),
    "bregman": ("bregman", "inner_updates", "beta_early", "beta_late", "beta_switch", "teacher_dropout"),
    "adversarial": ("adv_steps", "adv_lr", "adv_init_mag", "adv_max_norm", "adv_norm"),
    "observation": ("diagnostics_every",),
}


def test_every_field_declares_its_role() -> None:
    declared = {f.name: f.metadata.get("role") for f in fields(MethodConfig)}
    assert set(FIELD_ROLES) == set(declared) and FIELD_ROLES == declared
    assert set(FIELD_ROLES.values()) <= set(get_args(FieldRole))
    assert {role: fields_with(role) for role in ROLES} == ROLES  # each in declaration order
    assert fields_with("perturbation", "ascent") == (
        "epsilon", "sigma", "noise", "eta", "ascent_steps", "projection", "grad_norm", "norm_p",
        "renorm_stabilizer", "rs_dropout", "rs_arithmetic",
    )  # fmt: skip
    assert fields_with() == ()
    assert MethodConfig.__dataclass_fields__["lambda_s"].default == 1.0  # a role changes no default
