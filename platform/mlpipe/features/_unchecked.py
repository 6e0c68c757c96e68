"""Feast without typeguard's run-time type checks, for serving processes.

Feast decorates its definition classes (``Entity``, ``FeatureView``,
``FeatureService``, ``Field``, data sources, ...) with ``typeguard.typechecked``.
That decorator re-parses and re-compiles the source of each decorated method
when Feast is imported, and then type-checks every call to those methods.
On a slow 2-core machine it was 6.3 s of a 10.5 s ``import feast``, paid by
every serving worker as it starts (decision 011).

A serving process builds no definitions: it reads the registry that
``mlpipe features apply`` wrote, where the checks did run. So the scoring
service turns the decorator into a no-op before anything imports Feast. Every
other process (the CLI, ``features apply``, training) keeps the checks, which
is where a wrong type in ``feature_repo/`` must be reported.
"""

from __future__ import annotations

import sys
from typing import Any


def _unchecked(target: Any = None, **_options: Any) -> Any:
    """``typechecked`` that returns what it decorates (with or without options)."""
    return target if target is not None else _unchecked


def skip_feast_type_checks() -> bool:
    """Make ``typeguard.typechecked`` a no-op for Feast; False if Feast was imported already.

    Only Feast among this project's dependencies uses typeguard (``pip show
    typeguard``: required by feast), so nothing else loses a check.
    """
    if "feast" in sys.modules:
        return False
    import typeguard

    typeguard.typechecked = _unchecked
    return True
