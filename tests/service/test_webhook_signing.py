"""Webhook signatures: the service's `sign`, its `verify`, the SDK's `verify` and the ten lines in
docs/webhooks.md all agree; a changed body, another secret, a stale or future timestamp and a malformed
header are refused."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

import smartune.webhooks
from service.notify import signing

DOCS = Path(__file__).resolve().parents[2] / "docs" / "webhooks.md"
SECRET = "whsec_" + "ab" * 32
BODY = b'{"id":1,"type":"job.succeeded"}'
NOW = 1_767_225_600

Verifier = Callable[[str, bytes, str, float], bool]


def _docs_verify() -> Callable[..., bool]:
    """The snippet of docs/webhooks.md, run as it is written."""
    text = DOCS.read_text()
    block = re.search(r"<!-- verify-snippet:[^>]*-->\n```python\n(.*?)```", text, re.S)
    assert block, "docs/webhooks.md lost its verification snippet"
    assert len([ln for ln in block.group(1).splitlines() if ln.strip()]) <= 10  # the promise: ten lines
    scope: dict[str, object] = {}
    exec(block.group(1), scope)  # noqa: S102  (our own documentation)
    return scope["verify"]  # type: ignore[return-value]


def _service(secret: str, body: bytes, header: str, now: float) -> bool:
    return signing.verify(secret, body, header, now=now)


def _sdk(secret: str, body: bytes, header: str, now: float) -> bool:
    return smartune.webhooks.verify(secret, body, header, now=now)


def _docs(secret: str, body: bytes, header: str, now: float) -> bool:
    verify = _docs_verify()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("time.time", lambda: now)
        try:
            return verify(secret, body, header)
        except (KeyError, ValueError):  # the snippet raises on a malformed header: a refusal
            return False


VERIFIERS = pytest.mark.parametrize("verify", [_service, _sdk, _docs], ids=["service", "sdk", "docs"])


def test_the_header_is_the_hmac_of_timestamp_dot_body() -> None:
    import hashlib
    import hmac

    header = signing.sign(SECRET, BODY, NOW)
    expected = hmac.new(SECRET.encode(), f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert header == f"t={NOW},v1={expected}"
    assert signing.new_secret().startswith("whsec_") and signing.new_secret() != signing.new_secret()
    assert len(signing.new_secret()) == len("whsec_") + 64


@VERIFIERS
def test_a_signed_delivery_verifies_within_five_minutes(verify: Verifier) -> None:
    header = signing.sign(SECRET, BODY, NOW)
    assert verify(SECRET, BODY, header, NOW)
    assert verify(SECRET, BODY, header, NOW + 299)
    assert verify(SECRET, BODY, header, NOW - 299)  # a receiver's clock a little behind


@VERIFIERS
def test_tampering_another_secret_and_replays_are_refused(verify: Verifier) -> None:
    header = signing.sign(SECRET, BODY, NOW)
    assert not verify(SECRET, BODY + b" ", header, NOW)
    assert not verify(SECRET, BODY.replace(b"succeeded", b"failed"), header, NOW)
    assert not verify("whsec_" + "cd" * 32, BODY, header, NOW)
    assert not verify(SECRET, BODY, header, NOW + 301)  # replayed six minutes later
    assert not verify(SECRET, BODY, header, NOW - 301)  # from the future
    moved = header.replace(f"t={NOW}", f"t={NOW + 60}")  # the timestamp is signed too
    assert not verify(SECRET, BODY, moved, NOW + 60)


@VERIFIERS
@pytest.mark.parametrize("header", ["", "v1=00", f"t={NOW}", f"t=soon,v1={'0' * 64}", "garbage"])
def test_malformed_headers_are_refused(verify: Verifier, header: str) -> None:
    assert not verify(SECRET, BODY, header, NOW)
