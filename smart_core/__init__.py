"""smart_core: SMART (Jiang et al., ACL 2020) and baselines as a small, model-agnostic PyTorch library.

Depends on torch only. The public API:
    MethodConfig, METHOD_PRESETS, method_config   what to run (config.py)
    Objective, ModelFns                            one step's loss and components (objective.py)
    smoothness_regularizer, ascend                 R_s, Algorithm 1's inner maximisation (adversarial.py)
    ProximalReference                              MBPP / VBPP reference θ̃ (bregman.py)
    symmetric_kl, squared_error, divergence        ℓ_s (divergences.py)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "AdversarialResult": "adversarial",
    "ascend": "adversarial",
    "smoothness_regularizer": "adversarial",
    "freelb_loss": "baselines",
    "pgd_loss": "baselines",
    "ProximalReference": "bregman",
    "METHOD_PRESETS": "config",
    "MethodConfig": "config",
    "method_config": "config",
    "divergence": "divergences",
    "squared_error": "divergences",
    "symmetric_kl": "divergences",
    "task_loss": "divergences",
    "ModelFns": "objective",
    "Objective": "objective",
    "gradient_norm_ratio": "objective",
}
__all__ = [
    "AdversarialResult",
    "METHOD_PRESETS",
    "MethodConfig",
    "ModelFns",
    "Objective",
    "ProximalReference",
    "ascend",
    "divergence",
    "freelb_loss",
    "gradient_norm_ratio",
    "method_config",
    "pgd_loss",
    "smoothness_regularizer",
    "squared_error",
    "symmetric_kl",
    "task_loss",
]


def __getattr__(name: str) -> Any:
    # Lazy (PEP 562): `smart_core.config` stays importable without torch, e.g. by the CLI's flag parser.
    if name not in _EXPORTS:
        raise AttributeError(f"module 'smart_core' has no attribute {name!r}")
    return getattr(importlib.import_module(f"smart_core.{_EXPORTS[name]}"), name)


if TYPE_CHECKING:
    from smart_core.adversarial import AdversarialResult, ascend, smoothness_regularizer
    from smart_core.baselines import freelb_loss, pgd_loss
    from smart_core.bregman import ProximalReference
    from smart_core.config import METHOD_PRESETS, MethodConfig, method_config
    from smart_core.divergences import divergence, squared_error, symmetric_kl, task_loss
    from smart_core.objective import ModelFns, Objective, gradient_norm_ratio
