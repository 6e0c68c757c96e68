"""What a fresh interpreter imports, and how: each probe runs in a child ``python``.

- A serving worker, which runs optimized (the service's ``PYTHONOPTIMIZE``, decision
  038), imports Feast without typeguard's checks; every other process keeps them.
- skops is imported without PyTorch, and trusts the same types as when PyTorch is
  imported (``mlpipe.registry._sklearn_flavor``).

Moved from the unit suite (issue 31, item 5): a child interpreter importing mlpipe,
Feast or scikit-learn's estimators costs seconds, and import order is what they test.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

_FEAST_PROBE = """
from feast import Field
from feast.types import Float32
assert "TypeCheckMemo" not in Field.__init__.__code__.co_names
Field(name=5, dtype=Float32)  # a wrong type goes unchecked: the worker builds no definitions
"""

_SKOPS_PROBE = """
import sys
from mlpipe.registry._sklearn_flavor import TORCH_SHIM, _skops_io

skops_io = _skops_io()
assert "torch" not in sys.modules, "skops imported PyTorch"
assert TORCH_SHIM not in sys.modules  # held out for the import only

from skops.io._trusted_types import SKLEARN_ESTIMATOR_TYPE_NAMES
from skops.io._utils import get_type_name
from sklearn.utils import all_estimators

again = [get_type_name(c) for _, c in all_estimators() if get_type_name(c).startswith("sklearn.")]
assert "torch" in sys.modules  # this walk was not held back: it imported the shim and PyTorch
assert SKLEARN_ESTIMATOR_TYPE_NAMES == again, "the trusted list depends on the shim"
assert len(again) > 100
"""


def _probe(
    source: str, timeout: int, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", source],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else {**os.environ, **env},
    )


def test_feast_type_checks_are_off_in_an_optimized_interpreter() -> None:
    """What a serving worker gets: BentoML starts it with the service's ``envs``
    (``tests/e2e/test_serving.py`` reads them from a live worker)."""
    done = _probe(_FEAST_PROBE, timeout=120, env={"PYTHONOPTIMIZE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]


def test_other_processes_keep_feasts_type_checks() -> None:
    from feast import Field
    from feast.types import Float32
    from typeguard import TypeCheckError

    assert "TypeCheckMemo" in Field.__init__.__code__.co_names
    with pytest.raises(TypeCheckError, match="name"):
        Field(name=5, dtype=Float32)  # type: ignore[arg-type]


@pytest.mark.nn  # the walk of scikit-learn's estimators imports PyTorch
def test_skops_is_imported_without_torch_and_trusts_the_same_types() -> None:
    done = _probe(_SKOPS_PROBE, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
