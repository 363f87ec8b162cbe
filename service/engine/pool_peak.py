"""The most the pool has ever offered: the largest CPUs and GPUs any read of its capacity found, kept in
`<data dir>/pool-peak.json` by the engine's rounds (service.engine.rounds) so that `smartune admin
create-team`, which works on the store without a server, can warn about a quota the pool never had.

A file beside the store, not a table: it is a hint for a warning, written by whichever service reads the
pool, and losing it only means "unknown" again. It only grows; each resource's peak is kept apart.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from service.engine.scheduler import Resources

FILE_NAME = "pool-peak.json"


class Peak(NamedTuple):
    cpus: float
    gpus: float
    seen_at: str  # ISO 8601, UTC: when the last of the two peaks was read


def read(data_dir: Path) -> Peak | None:
    """The recorded peak, or None when none was (or the file is unreadable: a hint, not a record)."""
    try:
        doc = json.loads((data_dir / FILE_NAME).read_text())
        return Peak(float(doc["cpus"]), float(doc["gpus"]), str(doc["seen_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def record(data_dir: Path, capacity: Resources, known: Peak | None = None) -> Peak:
    """Raise the recorded peak to `capacity` where it is larger and return the peak; the file is written
    only when it changes (atomically: a reader never sees half of it). `known` is the caller's last peak,
    which saves reading the file on every round."""
    old = known if known is not None else read(data_dir)
    if old is not None and capacity.cpus <= old.cpus and capacity.gpus <= old.gpus:
        return old
    peak = Peak(
        max(capacity.cpus, old.cpus if old else 0.0),
        max(capacity.gpus, old.gpus if old else 0.0),
        datetime.now(UTC).isoformat(timespec="seconds"),
    )
    data_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=data_dir, prefix=f".{FILE_NAME}.")
    with os.fdopen(fd, "w") as out:
        json.dump(peak._asdict(), out)
    os.replace(tmp, data_dir / FILE_NAME)
    return peak
