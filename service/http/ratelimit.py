"""Rate limits: one token bucket per caller, so one team's script cannot starve the API for everyone.

A bucket holds at most `burst` tokens and refills at `rate` tokens per second; each request takes one, and
a request that finds the bucket empty is answered 429 with `Retry-After` (whole seconds until a token is
back). Callers are API keys by their public id once the key is verified, or client addresses for requests
without a valid key (so guessing keys is limited too). Health probes are never limited (the routes that
serve them do not ask).

The buckets live in this process's memory: each replica of the API (and each uvicorn worker) limits on
its own, so N replicas allow up to N x `rate` per key in total, and a restart refills every bucket.
Behind a reverse proxy the client address is the proxy's unless uvicorn trusts its forwarded headers
(`--forwarded-allow-ips`); every unauthenticated caller then shares one bucket.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """Token buckets by identity (`key:<id>`, `addr:<host>`); safe to call from several threads."""

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        max_buckets: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("a rate limit needs rate > 0 and burst >= 1")
        self.rate, self.burst, self.max_buckets, self.clock = rate, burst, max_buckets, clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def acquire(self, identity: str) -> float:
        """Take a token for `identity`: 0.0 when granted, else the seconds until one is available."""
        now = self.clock()
        with self._lock:
            bucket = self._buckets.get(identity)
            if bucket is None:
                if len(self._buckets) >= self.max_buckets:
                    self._forget_full(now)
                bucket = self._buckets[identity] = _Bucket(float(self.burst), now)
            bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.updated) * self.rate)
            bucket.updated = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return 0.0
            return (1.0 - bucket.tokens) / self.rate

    def _forget_full(self, now: float) -> None:
        """Drop buckets that have refilled (forgetting them changes nothing); if none has, drop them all:
        a flood of fresh addresses must not grow the memory without bound."""
        full_after = self.burst / self.rate
        idle = [k for k, b in self._buckets.items() if now - b.updated >= full_after]
        for identity in idle:
            del self._buckets[identity]
        if len(self._buckets) >= self.max_buckets:
            self._buckets.clear()

    def reset(self) -> None:
        with self._lock:
            self._buckets.clear()


def retry_after(wait_s: float) -> str:
    """The `Retry-After` value: whole seconds (RFC 9110), at least 1."""
    return str(max(1, math.ceil(wait_s)))
