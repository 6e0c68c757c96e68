"""Global options (``--debug``, ``--profile``) and the settings they select."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlpipe.config import Settings


@dataclass
class _State:
    debug: bool = False
    profile: str | None = None

    def settings(self) -> Settings:
        from mlpipe.config import load_settings

        return load_settings(profile=self.profile)


state = _State()
