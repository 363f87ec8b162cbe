"""The calibration table: measured seconds per training example, keyed by model x method x max_seq_length x
device, and the rules for a key it has not measured.

Two sources, one table: the packaged default (`calibration.json` beside this module; each entry says where
its number comes from) and the job store's `calibration` rows, refreshed from finished trials
(service/costs/refresh.py). A row of the store replaces the default entry of the same key: it was measured
on this deployment. A lookup answers the entry it used and, when it is not the exact key, the fallback by
name: the nearest max_seq_length of the same method (not scaled: batches are padded to their longest
example, so a larger limit costs little on short texts), else vanilla's cost times the method's measured
cost ratio.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.store.models import CalibrationRow

DEFAULT_PATH = Path(__file__).with_name("calibration.json")
ANY_GPU = "gpu"  # a device kind meaning "whichever GPU the table knows" (SMARTUNE_GPU_KIND unset)
DEFAULT_OVERHEAD_S = 20.0  # a trial's seconds outside its epochs when the file names none for the model


@dataclass(frozen=True)
class Entry:
    model: str
    method: str
    max_seq_length: int
    device: str  # "cpu" or the GPU's name as torch.cuda.get_device_name gives it
    train_s_per_example: float  # one training update's seconds per example (at batch_size, threads)
    threads: int | None = None
    batch_size: int | None = None
    source: str = ""
    samples: int = 0  # trials averaged into a refreshed entry; 0 for a packaged one

    @property
    def key(self) -> tuple[str, str, int, str]:
        return (self.model, self.method, self.max_seq_length, self.device)

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "method": self.method,
            "max_seq_length": self.max_seq_length,
            "device": self.device,
            "threads": self.threads,
            "train_s_per_example": self.train_s_per_example,
            "source": self.source,
        }


@dataclass(frozen=True)
class Match:
    """The cost a lookup settled on: per training example, per evaluated example, and how it got there."""

    train_s_per_example: float
    eval_s_per_example: float
    entry: Entry
    fallback: str | None  # None: the exact key was measured


@dataclass(frozen=True)
class Calibration:
    entries: tuple[Entry, ...]
    method_ratios: Mapping[str, float]  # a method's update cost over vanilla's
    eval_ratio: float  # one evaluated example over one vanilla training example
    overheads: Mapping[str, float]  # model (or "*") -> seconds a trial spends outside its epochs

    def overhead_s(self, model: str) -> float:
        return float(self.overheads.get(model, self.overheads.get("*", DEFAULT_OVERHEAD_S)))

    def devices(self, device: str) -> list[str]:
        """The device kinds a lookup for `device` may use: itself, or for ANY_GPU every GPU the table has."""
        if device != ANY_GPU:
            return [device]
        return sorted({e.device for e in self.entries if e.device != "cpu"})

    def lookup(self, model: str, method: str, max_seq_length: int, device: str) -> Match | None:
        for kind in self.devices(device):
            found = self._lookup(model, method, max_seq_length, kind)
            if found is not None:
                if device == ANY_GPU:
                    note = f"GPU kind unknown (SMARTUNE_GPU_KIND unset): used {kind!r}"
                    found = Match(found.train_s_per_example, found.eval_s_per_example, found.entry,
                                  "; ".join(filter(None, [note, found.fallback])))  # fmt: skip
                return found
        return None

    def _lookup(self, model: str, method: str, seq: int, device: str) -> Match | None:
        same = [e for e in self.entries if e.model == model and e.device == device]
        vanilla = _nearest([e for e in same if e.method == "vanilla"], seq)
        own = _nearest([e for e in same if e.method == method], seq)
        if own is not None:
            fallback = None if own.max_seq_length == seq else _scaled_note(own.max_seq_length, seq)
            return Match(
                own.train_s_per_example * _length(own, seq), self._eval(own, vanilla, seq), own, fallback
            )
        ratio = self.method_ratios.get(method)
        if vanilla is None or ratio is None:
            return None
        fallback = f"vanilla x method cost ratio {ratio:.2f}"
        if vanilla.max_seq_length != seq:
            fallback += f" ({_scaled_note(vanilla.max_seq_length, seq)})"
        train = vanilla.train_s_per_example * _length(vanilla, seq) * ratio
        return Match(train, self._eval(vanilla, vanilla, seq), vanilla, fallback)

    def _eval(self, entry: Entry, vanilla: Entry | None, seq: int) -> float:
        if vanilla is not None:
            return vanilla.train_s_per_example * _length(vanilla, seq) * self.eval_ratio
        per_example = entry.train_s_per_example * _length(entry, seq)
        return per_example / self.method_ratios.get(entry.method, 1.0) * self.eval_ratio


def _length(entry: Entry, seq: int) -> float:
    """An entry measured at another max_seq_length, scaled to `seq`: its batches were padded to their
    length, and an update's cost grows with the tokens (linearly on these encoders below 512: MiniLM on 2
    CPU threads, vanilla, 7.2 s an epoch at 128 against 3.5 s at 64, `python -m bench.estimate`)."""
    return seq / entry.max_seq_length


def _scaled_note(measured: int, seq: int) -> str:
    return f"nearest max_seq_length {measured}, scaled x{seq / measured:.2f} by length"


def _nearest(entries: list[Entry], seq: int) -> Entry | None:
    """The entry of the nearest max_seq_length (the longer one on a tie: it errs on the side of cost)."""
    return min(entries, key=lambda e: (abs(e.max_seq_length - seq), -e.max_seq_length), default=None)


def _entry(raw: Mapping[str, Any]) -> Entry:
    return Entry(
        model=str(raw["model"]),
        method=str(raw["method"]),
        max_seq_length=int(raw["max_seq_length"]),
        device=str(raw["device"]),
        train_s_per_example=float(raw["train_s_per_example"]),
        threads=int(raw["threads"]) if raw.get("threads") is not None else None,
        batch_size=int(raw["batch_size"]) if raw.get("batch_size") is not None else None,
        source=str(raw.get("source", "")),
    )


def from_document(document: Mapping[str, Any], rows: Iterable[Entry] = ()) -> Calibration:
    """The calibration format (calibration.json) with `rows` replacing entries of the same key."""
    entries = {e.key: e for e in map(_entry, document.get("entries", []))}
    entries |= {e.key: e for e in rows}
    return Calibration(
        entries=tuple(entries.values()),
        method_ratios={str(k): float(v) for k, v in document.get("method_ratios", {}).items()},
        eval_ratio=float(document.get("eval_ratio", 0.43)),
        overheads={str(k): float(v) for k, v in document.get("trial_overhead_s", {}).items()},
    )


@lru_cache(maxsize=1)
def default_document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DEFAULT_PATH.read_text())
    return document


def row_entry(row: CalibrationRow) -> Entry:
    return Entry(
        model=row.model,
        method=row.method,
        max_seq_length=row.max_seq_length,
        device=row.device,
        train_s_per_example=row.train_s_per_example,
        threads=row.threads,
        batch_size=row.batch_size,
        source=f"measured here: the mean of {row.samples} finished trial(s), last on {row.updated_at:%Y-%m-%d}",
        samples=row.samples,
    )


def load(session: Session) -> Calibration:
    """The packaged default with this deployment's measured rows over it."""
    rows = session.scalars(select(CalibrationRow)).all()
    return from_document(default_document(), (row_entry(r) for r in rows))
