"""A hostile pickle for the tests: loading it runs code (it writes a marker file)."""

from __future__ import annotations

import pickle
from pathlib import Path


class Planted:
    """Unpickling it writes ``marker`` (as a hostile model's ``__reduce__`` would run code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (Path.write_text, (self.marker, "ran"))


def plant(path: Path, marker: Path) -> Path:
    """Write a :class:`Planted` pickle at ``path`` (parents made); ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(Planted(marker)))
    return path
