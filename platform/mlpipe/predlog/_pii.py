"""PII fields are replaced by a keyed hash before they reach the log.

The hash is HMAC-SHA256 under ``settings.pii_key`` (truncated to 32 hex
characters): the same value always hashes the same, so joins and per-entity
counts still work, but the value cannot be recovered without the key.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from typing import Any

from mlpipe.routing import entity_key


class PiiHasher:
    """Hashes the values of the named fields in entity and feature mappings."""

    def __init__(self, fields: Iterable[str], key: str) -> None:
        self.fields = frozenset(fields)
        self._key = key.encode()

    def __bool__(self) -> bool:
        return bool(self.fields)

    def hash_value(self, value: Any) -> str:
        """The keyed hash of one value (``str(value)`` is what is hashed)."""
        return hmac.new(self._key, str(value).encode(), hashlib.sha256).hexdigest()[:32]

    def redact(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """A copy with every PII field's value hashed; other fields untouched."""
        if not self.fields or self.fields.isdisjoint(values):
            return dict(values)
        return {k: self.hash_value(v) if k in self.fields else v for k, v in values.items()}

    def redact_key(self, entity: Mapping[str, Any], key: str) -> str:
        """The entity-key string with PII values hashed (``customer_id=<hash>``)."""
        if not self.fields or self.fields.isdisjoint(entity):
            return key
        return entity_key(self.redact(entity))
