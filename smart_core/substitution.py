"""A torch function mode that runs given functions as others while active (the linearised step's operators)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch.overrides import TorchFunctionMode


class Substituting(TorchFunctionMode):
    """Calls `replacements[func]` instead of `func` while active; every other function runs as it is."""

    replacements: Mapping[Callable[..., Any], Callable[..., Any]] = {}

    def __init__(self, replacements: Mapping[Callable[..., Any], Callable[..., Any]] | None = None) -> None:
        """`replacements`: this mode's (default: the class's); one mode for several sets costs one Python call
        per torch function instead of one per set."""
        super().__init__()
        if replacements is not None:
            self.replacements = replacements

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        return self.replacements.get(func, func)(*args, **(kwargs or {}))
