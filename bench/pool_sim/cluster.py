"""Nodes of GPUs and where a trial goes on them, as Ray places a trial's bundle: a fractional trial on one
GPU with that much left, a trial of N whole GPUs on N free GPUs of one node. Best fit (the fullest place
that fits), so fractions pack and whole GPUs stay together. GPUs are indexed by their free fraction, so a
placement costs O(nodes), not O(GPUs)."""

from __future__ import annotations

from collections import defaultdict

_EPS = 1e-9
Where = tuple[int, tuple[int, ...]]  # (node, GPU indices on it)


class Cluster:
    def __init__(self, n_nodes: int, gpus_per_node: int) -> None:
        self.free = [[1.0] * gpus_per_node for _ in range(n_nodes)]  # per node, per GPU: fraction free
        self.by_free: dict[float, set[tuple[int, int]]] = defaultdict(set)
        for ni in range(n_nodes):
            for gi in range(gpus_per_node):
                self.by_free[1.0].add((ni, gi))
        self.whole = [gpus_per_node] * n_nodes  # GPUs entirely free, per node
        self.gpus = n_nodes * gpus_per_node

    def _set(self, ni: int, gi: int, value: float) -> None:
        old = self.free[ni][gi]
        self.by_free[old].discard((ni, gi))
        value = round(value, 6)
        self.free[ni][gi] = value
        self.by_free[value].add((ni, gi))
        self.whole[ni] += (value == 1.0) - (old == 1.0)

    def place(self, gpus: float) -> Where | None:
        """Take `gpus` and say where, or None where no node can hold it now."""
        if gpus < 1:
            for level in sorted(k for k, v in self.by_free.items() if v and k + _EPS >= gpus):
                ni, gi = next(iter(self.by_free[level]))  # deterministic: int tuples hash stably
                self._set(ni, gi, level - gpus)
                return ni, (gi,)
            return None
        need = int(gpus)
        fits = [(whole, ni) for ni, whole in enumerate(self.whole) if whole >= need]
        if not fits:
            return None
        _, ni = min(fits)
        chosen = tuple(gi for gi, f in enumerate(self.free[ni]) if f == 1.0)[:need]
        for gi in chosen:
            self._set(ni, gi, 0.0)
        return ni, chosen

    def release(self, gpus: float, where: Where) -> None:
        ni, chosen = where
        share = gpus if gpus < 1 else 1.0
        for gi in chosen:
            self._set(ni, gi, min(1.0, self.free[ni][gi] + share))
