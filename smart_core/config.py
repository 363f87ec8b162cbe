"""Method configuration for SMART and its baselines: one frozen dataclass, presets as data.

Symbols follow Jiang et al. (ACL 2020), Section 3 and Algorithm 1. Nothing here computes anything.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal, TypeVar, get_args

MethodName = Literal["vanilla", "smart", "r3f", "freelb", "pgd"]
Projection = Literal["ball", "renorm"]  # ball: clamp δ to the ε-ball (paper); renorm: official mt-dnn rule
GradNorm = Literal["example-inf", "token-inf", "example-l2", "none"]
NormP = Literal["inf", "2"]
BregmanKind = Literal["momentum", "vanilla", "none"]
DropoutMode = Literal["independent", "shared", "off"]  # see smart_core.dropout
NoiseDist = Literal["normal", "uniform"]  # ν ~ N(0, σ²) (SMART) or U(−σ, σ) (R3F's default)
# Where the perturbation is added: the embedding layer's output (SMART: after positions, LayerNorm and
# dropout) or the word embeddings before them (FreeLB, R3F and PGD as their papers and code do).
PerturbSite = Literal["embedding-output", "word-embeddings"]
# How R_s's passes run where the step's arithmetic cannot resolve the perturbation (smart_core.precision):
# auto: linearised at bf16 / TF32 (smart_core.linearized), else the exact step in fp32; fp32: the exact step
# in fp32 always; linearized: linearised below bf16's resolution whatever the arithmetic, fp32 included.
RsArithmetic = Literal["auto", "fp32", "linearized"]

# The smallest ε (ball) and σ that fp32, the most precise arithmetic a step runs at, resolves: below it
# the gradient of R_s points nowhere (cosine with fp64 0.946 at 1e-5, 0.084 at 1e-6 on MiniLM-L6, CPU;
# research/results/numerics.json, `python -m research.numerics`; smart_core.precision).
MIN_PERTURBATION = 1e-5

FIELD_CHOICES: dict[str, tuple[str, ...]] = {
    "method": get_args(MethodName),
    "projection": get_args(Projection),
    "grad_norm": get_args(GradNorm),
    "norm_p": get_args(NormP),
    "bregman": get_args(BregmanKind),
    "adv_norm": ("l2", "inf"),
    "rs_dropout": get_args(DropoutMode),
    "teacher_dropout": get_args(DropoutMode),
    "noise": get_args(NoiseDist),
    "perturb_site": get_args(PerturbSite),
    "rs_arithmetic": get_args(RsArithmetic),
}
_TEACHER_DROPOUT_BOOL = {False: "off", True: "independent"}  # the switch's older true/false spelling
FIELD_ALIASES: dict[str, tuple[Any, ...]] = {"teacher_dropout": tuple(_TEACHER_DROPOUT_BOOL)}  # also accepted

# What each field is to the equivalence of two configs (worker.contract.grid.canonical_method): the switch
# that makes it irrelevant to training. Every field declares its role where it is declared (`_role`).
FieldRole = Literal[
    "method",  # what the method is: its name and the weights λ_s, μ that switch R_s and D_Breg on
    "perturbation",  # R_s's perturbation: unused without R_s
    "ascent",  # the ascent step and its projection: unused without R_s, or with T_x = 0
    "site",  # where the perturbation is added: unused when nothing is perturbed
    "bregman",  # the proximal term's teacher: unused without D_Breg (μ = 0 or bregman none)
    "adversarial",  # FreeLB's and PGD's own: unused by every other method
    "observation",  # what is logged, never what is trained
]
_T = TypeVar("_T")


def _role(role: FieldRole, default: _T, help: str, *, ge: float | None = None, le: float | None = None) -> _T:
    """A MethodConfig field with its `role` (FieldRole), its one-line `help` and its bounds [ge, le] in its
    metadata: the job spec's JSON Schema and docs/spec.md are generated from them
    (worker.contract.method_schema), and `__post_init__` enforces the bounds."""
    return field(default=default, metadata={"role": role, "help": help, "ge": ge, "le": le})


@dataclass(frozen=True)
class MethodConfig:
    """Every hyperparameter of a training method; defaults are the paper's (Section 4.1, Appendix B)."""

    method: MethodName = _role("method", "smart", "the algorithm: vanilla, smart, r3f, freelb or pgd")
    # The outer R_s gradient differentiates the full symmetric KL; mt-dnn's released SymKlCriterion stops the
    # gradient in each of its two terms, i.e. half this gradient near δ = 0. So λ_s = 1 here acts like
    # mt-dnn's adv_alpha = 2 (classification; docs/architecture.md §4). Only copied values need halving.
    lambda_s: float = _role(
        "method", 1.0, "λ_s: weight of the smoothness regulariser R_s (0 = the paper's −R_s ablation)", ge=0
    )
    mu: float = _role(
        "method", 1.0, "μ: weight of the Bregman proximal term D_Breg (0 = the −D_Breg ablation)", ge=0
    )
    epsilon: float = _role(
        "ascent", 1e-5, "ε: radius of the ℓ_p ball of the `ball` projection (embedding units)", ge=0
    )
    sigma: float = _role(
        "perturbation", 1e-5, "σ: std of the initial noise ν ~ N(0, σ²I) (half-width with noise uniform); "
        "SMART and R3F refuse 0 < σ < 1e-5, which fp32 cannot resolve", ge=0,
    )  # fmt: skip
    noise: NoiseDist = _role("perturbation", "normal", "distribution of the initial noise ν")
    eta: float = _role("ascent", 1e-3, "η: ascent step size, applied to the normalised gradient", ge=0)
    ascent_steps: int = _role("perturbation", 1, "T_x: inner ascent steps (paper: 1; 0: noise only)", ge=0)
    projection: Projection = _role(
        "ascent", "ball", "ball: clamp δ to the ε-ball (the paper); renorm: the official mt-dnn rule"
    )
    grad_norm: GradNorm = _role(
        "ascent", "example-inf", "how the ascent gradient is normalised before the step (Algorithm 1 line 8: "
        "per example ℓ∞)",
    )  # fmt: skip
    norm_p: NormP = _role("ascent", "inf", "p of the ball (`ball`) or of the per-token norm (`renorm`)")
    renorm_stabilizer: float = _role(
        "ascent", 1e-6, "added to the per-token norm in `renorm` (mt-dnn's adv_epsilon), not a radius", ge=0
    )
    bregman: BregmanKind = _role(
        "bregman", "momentum", "the proximal term's teacher: momentum (MBPP, an EMA), vanilla (VBPP, the "
        "previous outer iterate) or none",
    )  # fmt: skip
    inner_updates: int = _role(
        "bregman", 1, "S: optimiser updates per outer proximal iteration (reference fixed during them)", ge=1
    )
    beta_early: float = _role(
        "bregman", 0.99, "β of the EMA teacher for the first `beta_switch` fraction of updates", ge=0, le=1
    )
    beta_late: float = _role("bregman", 0.999, "β of the EMA teacher afterwards", ge=0, le=1)
    beta_switch: float = _role("bregman", 0.1, "fraction of planned updates that use beta_early", ge=0, le=1)
    rs_dropout: DropoutMode = _role(
        "perturbation", "independent", "how the R_s forwards (ascent, perturbed, clean reference) treat "
        "dropout (smart_core.dropout)",
    )  # fmt: skip
    teacher_dropout: DropoutMode = _role(
        "bregman", "off", "the teacher f(x; θ̃): off = eval mode, a deterministic target (~1/3 cheaper on "
        "CPU); shared = the clean forward's masks; independent = masks of its own (true/false: independent/off)",
    )  # fmt: skip
    perturb_site: PerturbSite = _role(
        "site", "embedding-output", "where δ is added: the embedding layer's output (SMART) or the word "
        "embeddings (FreeLB, R3F, PGD)",
    )  # fmt: skip
    diagnostics_every: int = _role(
        "observation", 10, "every N-th step also measures R_s at δ = 0 and the ascent's signal (about two "
        "forwards); 0 = never", ge=0,
    )  # fmt: skip
    adv_steps: int = _role("adversarial", 2, "K: ascent steps of FreeLB / PGD (at least 1 for them)")
    adv_lr: float = _role("adversarial", 0.1, "α: FreeLB / PGD step size on the normalised gradient", ge=0)
    adv_init_mag: float = _role(
        "adversarial", 0.6, "FreeLB / PGD initial perturbation magnitude (0 = start clean)"
    )
    adv_max_norm: float = _role("adversarial", 0.0, "FreeLB / PGD projection radius (0 = no projection)")
    adv_norm: Literal["l2", "inf"] = _role(
        "adversarial", "l2", "FreeLB / PGD norm for init, normalisation and projection"
    )
    rs_arithmetic: RsArithmetic = _role(
        "perturbation", "fp32", "the arithmetic of R_s's passes below the step's resolution: auto, fp32 or "
        "linearized (docs/architecture.md §4)",
    )  # fmt: skip

    def __post_init__(self) -> None:
        if isinstance(self.teacher_dropout, bool):
            object.__setattr__(self, "teacher_dropout", _TEACHER_DROPOUT_BOOL[self.teacher_dropout])
        for name, allowed in FIELD_CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {getattr(self, name)!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "bool":
                if not isinstance(value, bool):
                    raise ValueError(f"{f.name} must be true or false, got {value!r}")
                continue
            if f.name not in FIELD_CHOICES and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise ValueError(f"{f.name} must be a number, got {value!r}")
            if f.type == "int":
                if not float(value).is_integer():
                    raise ValueError(f"{f.name} must be a whole number, got {value!r}")
                object.__setattr__(self, f.name, int(value))  # 2.0 from JSON/YAML -> 2 (frozen dataclass)
        self._check_bounds()
        self._check_resolution()
        self._check_method_identity()
        if self.method in ("freelb", "pgd") and self.adv_steps < 1:
            raise ValueError(f"adv_steps (K) must be >= 1 for {self.method}, got {self.adv_steps}")
        if self.uses_bregman and self.bregman == "vanilla" and self.inner_updates == 1:
            raise ValueError(
                "bregman='vanilla' (VBPP) with inner_updates S=1 is a no-op: the reference is the previous "
                "outer iterate, which equals the current weights, so D_Breg(θ_t, θ_t) = 0. "
                "Use S > 1 or bregman='momentum' (MBPP)."
            )

    def _check_bounds(self) -> None:
        """Each field's declared [ge, le] (its metadata)."""
        for f in fields(self):
            low, high, value = f.metadata["ge"], f.metadata["le"], getattr(self, f.name)
            if low is not None and high is not None and not low <= value <= high:
                raise ValueError(f"{f.name} must lie in [{low:g}, {high:g}], got {value}")
            if low is not None and value < low:
                raise ValueError(f"{f.name} must be >= {low:g}, got {value}")

    def _check_resolution(self) -> None:
        if self.method not in ("smart", "r3f") or self.lambda_s == 0:
            return
        sizes = [("sigma", self.sigma)]
        if self.projection == "ball" and self.ascent_steps > 0:
            sizes.append(("epsilon", self.epsilon))
        for name, value in sizes:
            if 0 < value < MIN_PERTURBATION:
                raise ValueError(
                    f"{name} = {value:g} is below what fp32 resolves on a LayerNorm-ed embedding: the "
                    f"gradient of R_s is rounding noise there (cosine 0.08 with fp64 at 1e-6, 0.95 at 1e-5 on "
                    f"MiniLM-L6, research/results/numerics.json). Use {name} >= {MIN_PERTURBATION:g} (the "
                    f"paper's value), or 0"
                )
        if self.rs_arithmetic == "linearized" and self.rs_dropout == "independent":
            raise ValueError(
                "rs_arithmetic 'linearized' cannot express rs_dropout 'independent' (a second dropout draw "
                "for f(x + δ)): use rs_dropout shared or off, or rs_arithmetic auto or fp32"
            )

    def _check_method_identity(self) -> None:
        """Overrides that would silently turn one method into another are refused."""
        if self.method in ("vanilla", "freelb", "pgd") and (self.lambda_s > 0 or self.mu > 0):
            raise ValueError(
                f"method {self.method} has no SMART regulariser: lambda_s and mu must be 0 "
                "(use method smart for R_s or the Bregman term)"
            )
        if self.method == "r3f" and self.ascent_steps != 0:
            raise ValueError(
                f"r3f uses random noise without an ascent step: ascent_steps must be 0, got "
                f"{self.ascent_steps} (that would be SMART; use method smart)"
            )
        if self.method == "r3f" and self.mu > 0:
            raise ValueError("r3f has no Bregman proximal term: mu must be 0 (use method smart)")

    @property
    def uses_smoothness(self) -> bool:
        """True when a step computes R_s (SMART with λ_s > 0, or R3F)."""
        return self.method in ("smart", "r3f") and self.lambda_s > 0

    @property
    def uses_bregman(self) -> bool:
        """True when a step adds μ·D_Breg against a reference model."""
        return self.method in ("smart", "r3f") and self.mu > 0 and self.bregman != "none"

    def with_overrides(self, **overrides: Any) -> MethodConfig:
        return replace(self, **overrides)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Named methods: the benchmark's and the CLI's vocabulary. Data, not branches.
METHOD_PRESETS: dict[str, dict[str, Any]] = {
    "vanilla": {"method": "vanilla", "lambda_s": 0.0, "mu": 0.0, "bregman": "none"},
    # Full SMART, paper text: ℓ∞-normalised gradient, step η, clamp to the ε-ball; MBPP teacher.
    "smart": {"method": "smart"},
    # The official mt-dnn rule: raw gradient, δ ← (δ + η·g) / (‖δ + η·g‖∞ per token + 1e-6).
    "smart-renorm": {"method": "smart", "projection": "renorm", "grad_norm": "none"},
    "smart-rs-only": {"method": "smart", "mu": 0.0, "bregman": "none"},  # the paper's −D_Breg
    "smart-breg-only": {"method": "smart", "lambda_s": 0.0},  # the paper's −R_s (momentum teacher only)
    # R3F (Aghajanyan et al. 2021; fairseq examples/rxf defaults): noise U(−1e-5, 1e-5) on the token
    # embeddings, no ascent, λ 1, symmetric KL.
    "r3f": {
        "method": "r3f",
        "mu": 0.0,
        "bregman": "none",
        "ascent_steps": 0,
        "noise": "uniform",
        "perturb_site": "word-embeddings",
    },  # fmt: skip
    # FreeLB (Zhu et al. 2020), zhuchen03/FreeLB launch/run_glue.sh, RTE: α 0.1, K 3, no init, no
    # projection, on the word embeddings, dropout masks shared across the K steps.
    "freelb": {
        "method": "freelb",
        "lambda_s": 0.0,
        "mu": 0.0,
        "bregman": "none",
        "adv_steps": 3,
        "adv_lr": 0.1,
        "adv_init_mag": 0.0,
        "adv_max_norm": 0.0,
        "perturb_site": "word-embeddings",
    },  # fmt: skip
    # PGD (Madry et al. 2018) as FreeLB's VanillaPGD MRPC script runs it: α 0.04, K 3, ℓ2 init 0.64,
    # ‖δ‖ ≤ 0.4, on the word embeddings, trained on the adversarial loss alone.
    "pgd": {
        "method": "pgd",
        "lambda_s": 0.0,
        "mu": 0.0,
        "bregman": "none",
        "adv_steps": 3,
        "adv_lr": 0.04,
        "adv_init_mag": 0.64,
        "adv_max_norm": 0.4,
        "perturb_site": "word-embeddings",
    },  # fmt: skip
}


# Preset fields that are defaults, not the preset's identity: a grid may sweep them (FreeLB's α and K,
# R3F's noise, the perturbation site). Every other preset field is pinned: a grid over `lambda_s` leaves
# `vanilla` and `smart-breg-only` alone.
TUNABLE_PRESET_FIELDS = frozenset(
    {"noise", "perturb_site", "adv_steps", "adv_lr", "adv_init_mag", "adv_max_norm", "adv_norm"}
)


FIELD_ROLES: dict[str, FieldRole] = {f.name: f.metadata["role"] for f in fields(MethodConfig)}


def fields_with(*roles: FieldRole) -> tuple[str, ...]:
    """The MethodConfig fields of these roles, in declaration order."""
    return tuple(name for name, role in FIELD_ROLES.items() if role in roles)


def method_config(name: str, **overrides: Any) -> MethodConfig:
    """The preset `name` (see METHOD_PRESETS) with `overrides` applied; unknown names list the known ones."""
    if name not in METHOD_PRESETS:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(sorted(METHOD_PRESETS))}")
    return MethodConfig(**{**METHOD_PRESETS[name], **overrides})
