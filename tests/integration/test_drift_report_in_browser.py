"""A hostile category in the drift report, opened in headless Chromium.

A client's category ends up in Evidently's embedded JSON: the page must escape it, and
the browser must draw the report without running it. The windows are the calibrated
drift verdicts' synthetic ones (tests/unit/monitoring/test_drift_verdicts.py); the test
moved here from there (issue 31, item 5): the browser costs seconds of a unit worker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlpipe.config import load_settings
from tests.unit.monitoring.test_drift_verdicts import _judge, _requests

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory):
    return load_settings(home=tmp_path_factory.mktemp("home"))


HOSTILE = "</script><script>alert(document.domain)</script>"
# Runs where the page does not escape, and leaves a mark that --dump-dom shows.
MARKING = "</script><script>document.documentElement.setAttribute('data-pwned','1')</script>"
CHROMIUM = Path("/usr/bin/chromium")


def test_a_hostile_category_is_no_live_script_in_the_report(settings, tmp_path: Path) -> None:
    """A client's category ends up in Evidently's embedded JSON: escaped, never a live tag."""
    frame = _requests(400, 11)
    frame.loc[::7, "country_risk"] = HOSTILE
    frame.loc[1::7, "country_risk"] = "<!--<script>"  # the double-escaped script state
    frame.loc[2::7, "country_risk"] = MARKING
    result = _judge(settings, frame, tmp_path)
    assert result.html is not None
    page = Path(result.html).read_bytes()
    assert b"</script><script>alert" not in page
    assert b"<!--<script>" not in page
    assert page.count(b"</script>") == page.lower().count(b"</script")  # no odd-case closer
    if not CHROMIUM.exists():
        pytest.skip("chromium not installed: the report was not opened in a browser")
    dom, console = _render(Path(result.html), tmp_path)
    assert 'data-pwned="1"' not in dom  # the injected script did not run
    assert "<svg" in dom or "<canvas" in dom  # the report itself did draw
    assert "Uncaught" not in console, console[-2000:]


def _render(html: Path, tmp_path: Path) -> tuple[str, str]:
    """``html`` opened in headless Chromium: the DOM after its scripts ran, and its console."""
    import subprocess

    try:
        run = subprocess.run(
            [
                str(CHROMIUM),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
                f"--user-data-dir={tmp_path / 'chromium-profile'}",
                "--enable-logging=stderr",
                "--v=0",
                "--virtual-time-budget=5000",
                "--dump-dom",
                html.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=90,
        )
    except subprocess.TimeoutExpired:  # headless Chromium waits on an open alert() for ever
        pytest.fail("Chromium hung on the report: an injected alert() is open")
    assert run.returncode == 0, run.stderr[-2000:]
    console = "\n".join(line for line in run.stderr.splitlines() if "CONSOLE" in line)
    return run.stdout, console
