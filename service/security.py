"""API keys: generation, parsing and verification. Pure functions, no database.

A key reads `smt_<key id>_<secret>`: the key id (12 hex characters) is public and indexes the key's row,
the secret carries 256 random bits. Only the SHA-256 digest of the whole key is stored; a presented key is
found by its id and compared with `hmac.compare_digest`, so the comparison takes the same time whatever
the mismatch. The key itself is shown once, when it is created.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

PREFIX = "smt"
_KEY_RE = re.compile(r"^smt_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
_DUMMY_DIGEST = hashlib.sha256(b"no such key").hexdigest()


@dataclass(frozen=True)
class NewKey:
    key_id: str
    key: str  # shown once
    digest: str


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def generate_key() -> NewKey:
    key_id = secrets.token_hex(6)
    key = f"{PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"  # 32 bytes = 256 bits
    return NewKey(key_id=key_id, key=key, digest=digest(key))


def parse_key_id(key: str) -> str | None:
    """The public key id of a well-formed key, else None."""
    match = _KEY_RE.match(key)
    return match.group(1) if match else None


def verify(key: str, stored_digest: str | None) -> bool:
    """Whether `key` hashes to `stored_digest`, in constant time (a missing row still costs a compare)."""
    return hmac.compare_digest(digest(key), stored_digest or _DUMMY_DIGEST) and stored_digest is not None
