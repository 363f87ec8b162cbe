"""Named search spaces, as data with their citation (docs/architecture.md §5, paper Section 4.1 and Table 3).

Each preset has grid `axes` (field -> values) and `defaults`: values applied to fields the job spec did
not set itself. Field names are TrainConfig fields (learning_rate, batch_size, epochs, method, seed, ...)
or MethodConfig fields (lambda_s, mu, epsilon, ...). Method values are names of smart_core's presets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SearchPreset:
    name: str
    citation: str
    description: str
    axes: dict[str, list[Any]] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)


_PAPER_SMART = {
    "mu": 1.0,
    "epsilon": 1e-5,
    "sigma": 1e-5,
    "eta": 1e-3,
    "projection": "ball",
    "ascent_steps": 1,
}

SEARCH_PRESETS: dict[str, SearchPreset] = {
    "smart-paper-grid": SearchPreset(
        name="smart-paper-grid",
        citation="Jiang et al., SMART, ACL 2020, Section 4.1 and Appendix B",
        description="lr {1,2,3,5}e-5 x batch {16,32,64} x lambda_s {1,3,5}; mu 1, eps = sigma = 1e-5, eta 1e-3, "
        "ball projection, at most 6 epochs, 10% warm-up (36 cells per seed)",
        axes={
            "learning_rate": [1e-5, 2e-5, 3e-5, 5e-5],
            "batch_size": [16, 32, 64],
            "lambda_s": [1.0, 3.0, 5.0],
        },
        defaults={
            "method": "smart",
            "epochs": 6,
            "warmup_fraction": 0.1,
            "optimizer": "adam",
            **_PAPER_SMART,
        },
    ),
    "smart-ablation": SearchPreset(
        name="smart-ablation",
        citation="Jiang et al., SMART, ACL 2020, Table 3 (SMART, -R_s, -D_Breg, BERT) plus the official code's renorm rule",
        description="vanilla, smart, smart-breg-only (-R_s: lambda_s = 0), smart-rs-only (-D_Breg: mu = 0), smart-renorm",
        axes={"method": ["vanilla", "smart", "smart-breg-only", "smart-rs-only", "smart-renorm"]},
        defaults={"warmup_fraction": 0.1, "optimizer": "adam", **_PAPER_SMART},
    ),
    "domain-adaptation": SearchPreset(
        name="domain-adaptation",
        citation="Jiang et al., SMART, ACL 2020, Section 5.4 (Tables 6 and 7: SNLI and SciTail trained on 0.1%, "
        "1%, 10% and 100% of their training data)",
        description="vanilla vs smart on 0.1% / 1% / 10% / 100% of the training set; the fractions are nested "
        "samples drawn with one fixed fraction_seed (13), so every method and seed sees the same examples",
        axes={"train_fraction": [0.001, 0.01, 0.1, 1.0], "method": ["vanilla", "smart"]},
        defaults={"warmup_fraction": 0.1, "optimizer": "adam", "fraction_seed": 13, **_PAPER_SMART},
    ),
    "quick": SearchPreset(
        name="quick",
        citation="smoke test, not from the paper",
        description="vanilla vs smart, one epoch: checks the plumbing in about a minute",
        axes={"method": ["vanilla", "smart"]},
        defaults={"epochs": 1, "epsilon": 1e-3},
    ),
}


def get_preset(name: str) -> SearchPreset:
    if name not in SEARCH_PRESETS:
        raise ValueError(f"unknown search-space preset {name!r}; known: {', '.join(sorted(SEARCH_PRESETS))}")
    return SEARCH_PRESETS[name]
