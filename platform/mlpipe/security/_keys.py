"""Tenants and their API keys in the control-plane database (SQLAlchemy Core).

A key reads ``mlp_<key_id>_<secret>``. Only ``key_id`` (an index, not a secret),
a random salt and ``sha256(salt + secret)`` are stored; the key itself is shown
once, when the tenant is added. The secret has 256 bits of entropy, so one
salted SHA-256 is enough (a slow KDF protects guessable passwords, not random
keys) and keeps verification at a microsecond per request.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Column,
    DateTime,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError as SqlIntegrityError

from mlpipe.engines import create_tables, transaction
from mlpipe.errors import Conflict, InvalidInput, NotFound

metadata = MetaData()

tenants = Table(
    "tenants",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("key_id", String(32), nullable=False, unique=True),
    Column("salt", String(64), nullable=False),
    Column("key_hash", String(64), nullable=False),
    Column("rate", Float, nullable=False),
    Column("burst", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("revoked_at", DateTime(timezone=True)),
    Column("actor", String(128), nullable=False),
    Column("pin", String(16)),  # "champion" | "canary": the arm this tenant always gets
)

PINS = ("champion", "canary")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_KEY = re.compile(r"^mlp_([0-9a-f]{12})_([A-Za-z0-9_-]{20,100})$")
_DUMMY_SALT = "0" * 32


@dataclass(frozen=True, slots=True)
class Tenant:
    """A tenant as stored: never the key, only what verifies it."""

    name: str
    key_id: str
    rate: float
    burst: int
    created_at: datetime
    revoked_at: datetime | None
    salt: str = ""
    key_hash: str = ""
    pin: str | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def public(self) -> dict[str, object]:
        """What ``tenants list`` shows (no salt, no hash)."""
        return {
            "name": self.name,
            "key_id": self.key_id,
            "rate": self.rate,
            "burst": self.burst,
            "created_at": self.created_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
            "active": self.active,
            "pin": self.pin,
        }


def hash_secret(salt: str, secret: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt) + secret.encode()).hexdigest()


def parse_key(key: str) -> tuple[str, str] | None:
    """(key_id, secret) of a well-formed key, else None."""
    m = _KEY.match(key)
    return (m.group(1), m.group(2)) if m else None


def verify_key(tenant: Tenant | None, secret: str) -> bool:
    """Constant-time check of ``secret`` against the tenant's hash (work done even for None)."""
    salt = tenant.salt if tenant is not None else _DUMMY_SALT
    expected = tenant.key_hash if tenant is not None else "0" * 64
    ok = hmac.compare_digest(hash_secret(salt, secret), expected)
    return ok and tenant is not None and tenant.active


class TenantStore:
    """Tenants behind one SQLAlchemy URL (the control plane's)."""

    def __init__(self, url: str) -> None:
        self.url = url
        create_tables(url, metadata)
        _add_pin_column(url)

    def add(
        self, name: str, *, rate: float, burst: int, actor: str, pin: str | None = None
    ) -> tuple[Tenant, str]:
        """Create a tenant; returns it and its API key (the only time the key exists in clear).

        Raises :class:`InvalidInput` for a bad name or limit, :class:`Conflict`
        if the name is taken (revoked tenants keep their name).
        """
        if not _NAME.match(name):
            raise InvalidInput(
                f"tenant name {name!r}: use letters, digits, '_', '-', '.' (at most 100)"
            )
        if rate <= 0 or burst < 1:
            raise InvalidInput("rate must be > 0 and burst >= 1")
        _check_pin(pin)
        key_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        salt = secrets.token_hex(16)
        now = datetime.now(UTC)
        row = {
            "name": name,
            "key_id": key_id,
            "salt": salt,
            "key_hash": hash_secret(salt, secret),
            "rate": float(rate),
            "burst": int(burst),
            "created_at": now,
            "revoked_at": None,
            "actor": actor,
            "pin": pin,
        }
        try:
            with transaction(self.url) as conn:
                conn.execute(insert(tenants).values(**row))
        except SqlIntegrityError as exc:
            raise Conflict(f"tenant {name!r} already exists") from exc
        row.pop("actor")
        return Tenant(**row), f"mlp_{key_id}_{secret}"  # type: ignore[arg-type]

    def revoke(self, name: str) -> Tenant:
        """Revoke the tenant's key (idempotent); raises :class:`NotFound` for an unknown name."""
        with transaction(self.url) as conn:
            conn.execute(
                update(tenants)
                .where(tenants.c.name == name)
                .where(tenants.c.revoked_at.is_(None))
                .values(revoked_at=datetime.now(UTC))
            )
            row = conn.execute(select(tenants).where(tenants.c.name == name)).first()
        if row is None:
            raise NotFound(f"no tenant {name!r}")
        return _to_tenant(row._mapping)

    def pin(self, name: str, arm: str | None) -> Tenant:
        """Pin the tenant to an arm (``None`` unpins); raises NotFound for an unknown name."""
        _check_pin(arm)
        with transaction(self.url) as conn:
            conn.execute(update(tenants).where(tenants.c.name == name).values(pin=arm))
            row = conn.execute(select(tenants).where(tenants.c.name == name)).first()
        if row is None:
            raise NotFound(f"no tenant {name!r}")
        return _to_tenant(row._mapping)

    def list(self) -> list[Tenant]:
        with transaction(self.url) as conn:
            rows = conn.execute(select(tenants).order_by(tenants.c.name)).all()
        return [_to_tenant(r._mapping) for r in rows]


def _check_pin(pin: str | None) -> None:
    if pin is not None and pin not in PINS:
        raise InvalidInput(f"pin: {pin!r} is not an arm; use one of {', '.join(PINS)} (or none)")


def _add_pin_column(url: str) -> None:
    """Control planes created before tenant pinning lack ``pin``; add it (idempotent)."""
    with transaction(url) as conn:
        if "pin" not in {c["name"] for c in inspect(conn).get_columns("tenants")}:
            conn.execute(text("ALTER TABLE tenants ADD COLUMN pin VARCHAR(16)"))


def _as_utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _to_tenant(row: Any) -> Tenant:
    return Tenant(
        name=row["name"],
        key_id=row["key_id"],
        rate=float(row["rate"]),
        burst=int(row["burst"]),
        created_at=_as_utc(row["created_at"]),  # type: ignore[arg-type]
        revoked_at=_as_utc(row["revoked_at"]),
        salt=row["salt"],
        key_hash=row["key_hash"],
        pin=row["pin"],
    )
