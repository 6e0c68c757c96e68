"""Names on the request path: a new request's id, and this worker's in segment file names."""

from __future__ import annotations

import os
import uuid


def new_request_id() -> str:
    """An id for a request that came without one (32 hex digits)."""
    return uuid.uuid4().hex


def worker_id() -> str:
    """This process's name in segment file names."""
    return f"w{os.getpid()}"


__all__ = ["new_request_id", "worker_id"]
