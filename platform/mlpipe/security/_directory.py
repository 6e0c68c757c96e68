"""The serving side's view of the tenants: a snapshot of the table, refreshed in the background.

Requests never wait on the database: :meth:`TenantDirectory.authenticate`
reads the last snapshot, which a daemon thread reloads every
``key_refresh_s`` (so ``tenants add`` and ``tenants revoke`` take effect
within about that long). If a reload fails, the last snapshot stays.
"""

from __future__ import annotations

import logging
import threading

from mlpipe.errors import MlpipeError
from mlpipe.security._keys import Tenant, TenantStore, parse_key, verify_key

logger = logging.getLogger("mlpipe.security")


class TenantDirectory:
    def __init__(self, store: TenantStore, refresh_s: float = 1.0) -> None:
        self.store = store
        self.refresh_s = refresh_s
        self._by_key_id: dict[str, Tenant] = {}
        self._loaded = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def loaded(self) -> bool:
        """True once one snapshot was read."""
        return self._loaded

    @property
    def any_tenants(self) -> bool:
        """True if any tenant (active or revoked) exists: ``auth = "auto"`` then requires keys."""
        return bool(self._by_key_id)

    def reload(self) -> None:
        """Read the table now; keeps the last snapshot (and logs) if the store fails."""
        try:
            rows = self.store.list()
        except MlpipeError:
            logger.exception("tenants: reload failed; keeping the last snapshot")
            return
        self._by_key_id = {t.key_id: t for t in rows}
        self._loaded = True

    def start(self) -> TenantDirectory:
        self.reload()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="mlpipe-tenants", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def authenticate(self, key: str | None) -> Tenant | None:
        """The active tenant of this key, else None (unknown, malformed or revoked alike)."""
        parsed = parse_key(key) if key else None
        if parsed is None:
            verify_key(None, key or "")  # same work as a real check
            return None
        key_id, secret = parsed
        tenant = self._by_key_id.get(key_id)
        return tenant if verify_key(tenant, secret) else None

    def _run(self) -> None:
        while not self._stop.wait(self.refresh_s):
            self.reload()
