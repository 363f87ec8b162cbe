"""What `smartune admin create-team` checks before it writes a team: its data roots exist on this machine
(else refused, unless `--force`: a folder mounted later), and its GPU and CPU quotas are within what the
pool has ever offered (else a warning; with the pool never read, a warning that it is unknown).

The pool's peak is what the service recorded in its data directory (service.engine.pool_peak), raised to
an autoscaler's ceiling where the deployment declares node types: `create-team` needs no running server.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.config import Settings


def missing_roots(roots: list[str] | None) -> list[str]:
    """The roots that are not folders on this machine."""
    return [root for root in roots or [] if not Path(root).is_dir()]


def check_roots(roots: list[str] | None, *, force: bool) -> list[str]:
    """Warnings for missing roots accepted with `force`; ValueError naming the first one otherwise."""
    missing = missing_roots(roots)
    if missing and not force:
        raise ValueError(
            f"--data-root {missing[0]}: no such folder on this machine; create it first, or pass --force "
            "if it is mounted later (trials read their data there)"
        )
    return [
        f"--data-root {root} does not exist yet (--force): jobs using it fail until it does"
        for root in missing
    ]


def pool_reach(settings: Settings) -> tuple[float, float, str] | None:
    """(CPUs, GPUs, where from) of the most the pool has offered or can offer; None when unknown."""
    from service.engine import pool_peak
    from service.engine.autoscaler import Autoscaler

    peak = pool_peak.read(settings.data_dir)
    autoscaler = Autoscaler.of(settings.autoscaled_node_types)
    if autoscaler is not None:
        ceiling = autoscaler.ceiling()
        cpus, gpus = max(ceiling.cpus, peak.cpus if peak else 0), max(ceiling.gpus, peak.gpus if peak else 0)
        return (
            cpus,
            gpus,
            "the autoscaler's ceiling" + (f" and the peak read at {peak.seen_at}" if peak else ""),
        )
    if peak is None:
        return None
    return peak.cpus, peak.gpus, f"read by the service, last raised {peak.seen_at}"


def check_quotas(gpus: float | None, cpus: float | None, settings: Settings) -> list[str]:
    """Warnings for a quota above what the pool has ever offered, or for a pool never read."""
    if gpus is None and cpus is None:
        return []
    reach = pool_reach(settings)
    if reach is None:
        return [
            f"the pool's size is unknown (no `smartune serve` with the data directory {settings.data_dir} has "
            "read it yet): the quotas are not checked against it"
        ]
    most_cpus, most_gpus, basis = reach
    warnings = []
    for flag, quota, most, unit in (("--gpus", gpus, most_gpus, "GPUs"), ("--cpus", cpus, most_cpus, "CPUs")):
        if quota is not None and quota > most:
            warnings.append(
                f"{flag} {quota:g} exceeds the most {unit} the pool has ever offered ({most:g}; {basis}): "
                f"the team can never use more than {most:g}"
            )
    return warnings
