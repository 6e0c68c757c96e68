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

    def settings(self, *, project: bool = True) -> Settings:
        """The settings of the project around the working directory (``MLPIPE_HOME`` wins).

        Outside a project this raises ConfigError ("not an mlpipe project", exit 2);
        with ``project=False`` (``demo``) the working directory serves instead.
        """
        from mlpipe.config import find_project, load_settings, project_or_cwd

        home = find_project() if project else project_or_cwd()
        return load_settings(profile=self.profile, home=home)


state = _State()
