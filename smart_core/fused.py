"""The linearised step's written-out operators compiled into a few kernels each, on an accelerator.

smart_core.layer_norm and smart_core.attention write out the tangents that PyTorch's fused kernels cannot
give (and recompute their gradients): each is a dozen to a hundred small elementwise and reduction ops. On a
GPU a linearised step is launch-bound (an H200 spent about 40 µs of step time per kernel launch, whatever the
method: bench/results/step_gpu.json), so those ops, not the FLOPs, set its time. They are pure functions of
tensors, without random draws (dropout masks come in as tensors), so `torch.compile` fuses each into a few
kernels without the graph breaks that compiling the whole step meets (the attention seed, dual tensors).

    function(fn)(*args)          fn(*args), compiled where enabled
    vjp(fn, needed)(*args, grad) the gradient of ⟨fn(*args), grad⟩ w.r.t. the args that `needed` names

Where: `SMARTUNE_FUSED_HELPERS` = `auto` (the default: on CUDA when Triton is installed), `on` (any device,
CPU included: the tests check the compiled path against the eager one there) or `off`; `fusing(mode)` sets it
for a block. Eager always: under a TorchDispatchMode (bench.flops counts the eager step's kernels) and inside
a functorch transform (a compiled model's linearised step, smart_core.linearized.jvp(dual=False)). A helper
whose compilation fails runs eager from then on, with one warning.

Each compiled helper is specialised on its non-tensor arguments (dims, eps, dtype, rate, scale), on which
optional tensors are None and on `needed`; sizes are dynamic, so a new batch or length does not recompile.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import _get_current_dispatch_mode

MODES = ("auto", "on", "off")
ENV = "SMARTUNE_FUSED_HELPERS"
RECOMPILE_LIMIT = 64  # raised to this at the first compile (never lowered)
_state = {"mode": os.environ.get(ENV, "auto")}
_compiled: dict[tuple[Any, ...], Callable[..., Any]] = {}
_tally = {"depth": 0, "calls": 0}  # helpers running now (nested) and called so far: bench.flops reads them
_broken: set[tuple[Any, ...]] = set()  # helpers whose compilation failed: eager from then on


def mode() -> str:
    """The current mode (`auto`, `on` or `off`)."""
    value = _state["mode"]
    if value not in MODES:
        raise ValueError(f"{ENV} must be one of {', '.join(MODES)}, got {value!r}")
    return value


@contextlib.contextmanager
def fusing(value: str) -> Iterator[None]:
    """Runs the block with the helpers' mode set to `value`."""
    if value not in MODES:
        raise ValueError(f"the fused helpers' mode must be one of {', '.join(MODES)}, got {value!r}")
    before, _state["mode"] = _state["mode"], value
    try:
        yield
    finally:
        _state["mode"] = before


def wanted(device: torch.device) -> bool:
    """Whether the mode asks for compiled helpers on `device` (`enabled` says whether they run so now)."""
    current = mode()
    return current == "on" or (current == "auto" and device.type == "cuda" and _has_triton())


def enabled(device: torch.device) -> bool:
    """Whether helpers for tensors on `device` run compiled now (module docstring)."""
    if not wanted(device):
        return False
    # bench.flops's counter would see the compiled code's fallbacks, not its kernels; a functorch level would
    # have dynamo trace through the transform's wrappers
    return _get_current_dispatch_mode() is None and torch._C._functorch.maybe_current_level() is None


def _has_triton() -> bool:
    return importlib.util.find_spec("triton") is not None


def _first_device(args: Sequence[Any]) -> torch.device:
    return next(a.device for a in args if isinstance(a, Tensor))


def _call(
    key: tuple[Any, ...], eager: Callable[..., Any], traced: Callable[..., Any], args: Sequence[Any]
) -> Any:
    """`eager(*args)`, or `traced` compiled (cached under `key`) where enabled: the same function of args."""
    _tally["calls"] += 1
    _tally["depth"] += 1
    try:
        return _run(key, eager, traced, args)
    finally:
        _tally["depth"] -= 1


def inside_helper() -> bool:
    """Whether a helper is running (eager, under bench.flops's counter): its ops would be one compiled region."""
    return _tally["depth"] > 0


def helper_calls() -> int:
    """Helper calls in this process so far, compiled or eager."""
    return _tally["calls"]


def _run(
    key: tuple[Any, ...], eager: Callable[..., Any], traced: Callable[..., Any], args: Sequence[Any]
) -> Any:
    if key in _broken or not enabled(_first_device(args)):
        return eager(*args)
    compiled = _compiled.get(key)
    if compiled is None:
        # Dynamo's limit counts a code object's variants across every wrapper of it: the helpers share theirs
        # (`gradients` serves every vjp), and their specialisations multiply (module docstring)
        config = torch._dynamo.config
        config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
        compiled = _compiled[key] = torch.compile(traced, dynamic=True, fullgraph=True)
    try:
        return compiled(*args)
    except torch.OutOfMemoryError:  # the device's, not the compiler's: eager would not fit either
        raise
    except Exception as err:  # a real error in the helper, eager, raises again below
        _broken.add(key)
        warnings.warn(f"smart_core.fused: {key[1]} runs eager: compiling it failed ({err})", stacklevel=3)
        return eager(*args)


def function(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """`fn`, compiled where enabled."""

    def run(*args: Any) -> Tensor:
        out: Tensor = _call(("function", fn.__qualname__, fn), fn, fn, args)
        return out

    return run


def _traced_vjp(fn: Callable[..., Tensor], needed: tuple[bool, ...]) -> Callable[..., tuple[Tensor, ...]]:
    """(*args, grad) -> the gradients by torch.func.vjp (which dynamo traces; autograd.grad it does not)."""
    wanted = [i for i, n in enumerate(needed) if n]

    def gradients(*args: Any) -> tuple[Tensor, ...]:
        *inputs, grad = args

        def of_wanted(*chosen: Tensor) -> Tensor:
            full = list(inputs)
            for i, tensor in zip(wanted, chosen, strict=True):
                full[i] = tensor
            return fn(*full)

        pull = torch.func.vjp(of_wanted, *(inputs[i] for i in wanted))[1]
        return tuple(pull(grad))

    return gradients


def _eager_vjp(fn: Callable[..., Tensor], needed: tuple[bool, ...]) -> Callable[..., tuple[Tensor, ...]]:
    """(*args, grad) -> the gradients by autograd (less host time than functorch's wrappers, eager)."""

    def gradients(*args: Any) -> tuple[Tensor, ...]:
        *inputs, grad = args
        # every tensor detached (a saved tensor may carry its graph): only the chosen ones are recorded
        leaves = [
            t.detach().requires_grad_(n) if isinstance(t, Tensor) else t
            for t, n in zip(inputs, needed, strict=True)
        ]
        chosen = [t for t, n in zip(leaves, needed, strict=True) if n]
        with torch.enable_grad():  # a backward runs without grad mode
            out = fn(*leaves)
        if not out.requires_grad:  # depends on none of them
            return tuple(torch.zeros_like(t) for t in chosen)
        found = torch.autograd.grad(out, chosen, grad, allow_unused=True)
        return tuple(torch.zeros_like(t) if g is None else g for g, t in zip(found, chosen, strict=True))

    return gradients


def vjp(fn: Callable[..., Tensor], needed: Sequence[bool]) -> Callable[..., tuple[Tensor, ...]]:
    """(*args, grad) -> the gradients of ⟨fn(*args), grad⟩ with respect to the args `needed` names, in order
    (True only at tensors; a shorter list leaves the rest undifferentiated). An argument fn does not use gets
    zeros. Compiled where enabled."""
    flags = tuple(bool(n) for n in needed)
    if not any(flags):
        raise ValueError("vjp needs at least one argument to differentiate")
    cache: dict[int, tuple[Callable[..., tuple[Tensor, ...]], Callable[..., tuple[Tensor, ...]]]] = {}

    def run(*args: Any) -> tuple[Tensor, ...]:
        count = len(args) - 1
        if count not in cache:
            padded = flags + (False,) * (count - len(flags))
            cache[count] = (_eager_vjp(fn, padded), _traced_vjp(fn, padded))
        eager, traced = cache[count]
        out: tuple[Tensor, ...] = _call(("vjp", fn.__qualname__, fn, flags, count), eager, traced, args)
        return out

    return run
