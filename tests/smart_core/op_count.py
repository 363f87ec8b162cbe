"""A dispatch mode that counts given aten ops while active: the tests' count of casts or zero fills."""

from __future__ import annotations

from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode


class OpCount(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts the calls of `ops` (aten overload packets) while active; re-enterable, the count accumulates."""

    def __init__(self, *ops: Any) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops, self.count = ops, 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.count += func._overloadpacket in self.ops
        return func(*args, **(kwargs or {}))
