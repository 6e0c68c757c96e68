"""PII fields are hashed under a key before they reach the log."""

from __future__ import annotations

from mlpipe.predlog import PiiHasher


def test_pii_hashing() -> None:
    h = PiiHasher(["email"], "k1")
    red = h.redact({"email": "a@b.c", "amount": 3.0})
    assert red["amount"] == 3.0 and red["email"] != "a@b.c" and len(red["email"]) == 32
    assert red == h.redact({"email": "a@b.c", "amount": 3.0})
    assert PiiHasher(["email"], "k2").redact({"email": "a@b.c"})["email"] != red["email"]
    assert h.redact_key({"email": "a@b.c"}, "email=a@b.c") == f"email={red['email']}"
    assert not PiiHasher([], "k")
    assert PiiHasher([], "k").redact_key({"id": 1}, "id=1") == "id=1"
