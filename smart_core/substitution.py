"""A torch function mode that runs given functions as others while active (the linearised step's operators)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch.overrides import TorchFunctionMode


class Substituting(TorchFunctionMode):
    """Calls `replacements[func]` instead of `func` while active; every other function runs as it is."""

    replacements: Mapping[Callable[..., Any], Callable[..., Any]] = {}

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        return self.replacements.get(func, func)(*args, **(kwargs or {}))
