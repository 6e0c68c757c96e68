"""The scoring service imports Feast without typeguard's checks; nothing else does."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

_PROBE = """
from mlpipe.features import skip_feast_type_checks
assert skip_feast_type_checks()
from feast import Field
assert "TypeCheckMemo" not in Field.__init__.__code__.co_names
assert not skip_feast_type_checks()  # Feast is imported now: too late, and it says so
"""


def test_skipped_before_feast_is_imported_its_methods_are_not_instrumented() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_other_processes_keep_the_checks() -> None:
    from feast import Field

    assert "TypeCheckMemo" in Field.__init__.__code__.co_names
