"""Nodes of GPUs and where a trial goes on them, as Ray places a trial's bundle: a fractional trial on one
GPU with that much left, a trial of N whole GPUs on N free GPUs of one node. Best fit (the fullest place
that fits), so fractions pack and whole GPUs stay together. GPUs are indexed by their free fraction, so a
placement costs O(nodes), not O(GPUs).

`ray_scorer=True` picks the node as Ray's placement-group scheduler does for a one-bundle group (Tune's
trials; `BundlePackSchedulingPolicy` with `LeastResourceScorer`, Ray 2.x): among the nodes that fit, the one
with the highest sum over the requested resources of (available - requested) / available, the emptiest, so
fractions spread over the nodes and a node's GPUs stay free less often; lowest index on ties. Within the
node a fraction goes best fit. CPUs then count too (`node_cpus` per node, `cpus` per trial).
research/pool_replay measured the difference on a real cluster.

`node_fit=True` picks the node as the worker's best-fit hint does (worker.tune.placement, the service's
default): the node left with the fewest GPUs, among those where the trial fits; then best fit within it, as
Ray allocates a node's GPUs. It differs from the default only in looking at nodes, not single GPUs."""

from __future__ import annotations

from collections import defaultdict

_EPS = 1e-9
Where = tuple[int, tuple[int, ...]]  # (node, GPU indices on it)


class Cluster:
    def __init__(
        self,
        n_nodes: int,
        gpus_per_node: int,
        *,
        ray_scorer: bool = False,
        node_fit: bool = False,
        node_cpus: float = 0.0,
    ) -> None:
        self.free = [[1.0] * gpus_per_node for _ in range(n_nodes)]  # per node, per GPU: fraction free
        self.by_free: dict[float, set[tuple[int, int]]] = defaultdict(set)
        for ni in range(n_nodes):
            for gi in range(gpus_per_node):
                self.by_free[1.0].add((ni, gi))
        self.whole = [gpus_per_node] * n_nodes  # GPUs entirely free, per node
        self.gpus = n_nodes * gpus_per_node
        self.ray_scorer, self.node_fit = ray_scorer, node_fit
        self.by_node = ray_scorer or node_fit  # a node is chosen first, by its totals
        self.cpus = [node_cpus] * n_nodes  # per node: CPUs free (counted when `by_node` only)

    def _set(self, ni: int, gi: int, value: float) -> None:
        old = self.free[ni][gi]
        self.by_free[old].discard((ni, gi))
        value = round(value, 6)
        self.free[ni][gi] = value
        self.by_free[value].add((ni, gi))
        self.whole[ni] += (value == 1.0) - (old == 1.0)

    def _by_node(self, gpus: float, cpus: float) -> Where | None:
        best: tuple[float, Where] | None = None
        for ni, free in enumerate(self.free):
            if cpus > self.cpus[ni] + _EPS:
                continue
            if gpus < 1:
                fits = sorted((f, gi) for gi, f in enumerate(free) if f + _EPS >= gpus)[:1]
            else:
                fits = [(1.0, gi) for gi, f in enumerate(free) if f == 1.0][: int(gpus)]
                fits = fits if len(fits) == int(gpus) else []
            if not fits:
                continue
            if self.node_fit:  # the fullest: fewest GPUs left (negated: the highest score wins)
                score = -(sum(free) - gpus) - ((self.cpus[ni] - cpus) / self.cpus[ni] * 1e-3 if cpus else 0.0)
            else:  # Ray's LeastResourceScorer: the emptiest
                score = (sum(free) - gpus) / sum(free) + (
                    (self.cpus[ni] - cpus) / self.cpus[ni] if cpus else 0.0
                )
            if best is None or score > best[0] + _EPS:
                best = (score, (ni, tuple(gi for _, gi in fits)))
        return best[1] if best else None

    def place(self, gpus: float, cpus: float = 0.0) -> Where | None:
        """Take `gpus` (and `cpus`) and say where, or None where no node can hold it now."""
        if self.by_node:
            where = self._by_node(gpus, cpus)
            if where is not None:
                for gi in where[1]:
                    self._set(where[0], gi, self.free[where[0]][gi] - min(gpus, 1.0))
                self.cpus[where[0]] -= cpus
            return where
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

    def release(self, gpus: float, where: Where, cpus: float = 0.0) -> None:
        ni, chosen = where
        self.cpus[ni] += cpus if self.by_node else 0.0
        share = gpus if gpus < 1 else 1.0
        for gi in chosen:
            self._set(ni, gi, min(1.0, self.free[ni][gi] + share))
