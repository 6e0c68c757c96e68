"""``mlpipe tenants``: the real console script against a real control plane."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.integration


def _pins() -> dict[str, str | None]:
    listed = run_cli("tenants", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return {t["name"]: t["pin"] for t in json.loads(listed.stdout)}


def test_add_pin_unpin_and_bad_input_changes_nothing(home: Path) -> None:
    added = run_cli("tenants", "add", "acme", "--pin", "canary")
    assert added.returncode == 0, added.stderr
    assert added.stdout.strip().startswith("mlp_")  # the key, alone on stdout
    assert _pins() == {"acme": "canary"}

    bad = run_cli("tenants", "pin", "acme", "shadow")
    assert bad.returncode == 2
    assert "pin: 'shadow' is not an arm; use one of champion, canary (or none)" in bad.stderr
    assert "Traceback" not in bad.stderr
    unknown = run_cli("tenants", "pin", "nobody", "canary")
    assert unknown.returncode == 2 and "no tenant 'nobody'" in unknown.stderr
    refused = run_cli("tenants", "add", "beta", "--pin", "blue")
    assert refused.returncode == 2 and "pin: 'blue' is not an arm" in refused.stderr
    assert _pins() == {"acme": "canary"}

    unpinned = run_cli("tenants", "pin", "acme", "none")
    assert unpinned.returncode == 0 and "routed by the split again" in unpinned.stderr
    assert _pins() == {"acme": None}
