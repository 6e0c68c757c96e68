"""skops is imported without PyTorch, and trusts the same types as when PyTorch is imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

_PROBE = """
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


@pytest.mark.nn  # the walk of scikit-learn's estimators imports PyTorch
def test_skops_is_imported_without_torch_and_trusts_the_same_types() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=REPO, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
