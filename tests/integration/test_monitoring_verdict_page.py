"""One verdict everywhere: the HTML drift report, rendered in headless Chromium, leads with the
verdict, alarms, quality (with the baseline it was judged against) and thresholds the CLI
prints, and Evidently's own drift words never contradict it (issue 28, item 4), on a clean, a
drifted and a quality-failing window.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import run_in_process
from tests.integration import test_registered_baseline as qb

pytestmark = pytest.mark.integration
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _rendered_text(page: Path, profile: Path) -> str:
    """The page's text after its scripts ran, one line per element."""
    run = subprocess.run(
        [
            str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    dom = re.sub(r"<(script|style)\b.*?</\1>", "", run.stdout, flags=re.S)
    lines = html.unescape(re.sub(r"<[^>]+>", "\n", dom)).splitlines()
    return "\n".join(line.strip() for line in lines if line.strip())


def rendered_layout(page: Path, scratch: Path, width: int = 1280) -> dict[str, Any]:
    """How wide ``page`` renders in Chromium at ``width`` px: the document's scroll width,
    the viewport's, and each table's (scroll width, visible width)."""
    scratch.mkdir(parents=True, exist_ok=True)
    probe = scratch / page.name
    measure = (
        "<script>document.body.setAttribute('data-layout', JSON.stringify({page: "
        "document.documentElement.scrollWidth, view: window.innerWidth, tables: "
        "[...document.querySelectorAll('table')].map(t => [t.scrollWidth, t.clientWidth])}))"
        "</script>"
    )
    probe.write_text(page.read_text().replace("</body>", f"{measure}</body>"))
    run = subprocess.run(
        [
            str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={scratch / 'profile'}", f"--window-size={width},900",
            "--virtual-time-budget=5000", "--dump-dom", probe.as_uri(),
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    found = re.search(r'data-layout="([^"]*)"', run.stdout)
    assert found, run.stdout[:2000]
    return dict(json.loads(html.unescape(found.group(1))))


def _window(kind: str, rows: int = 1500) -> tuple[np.ndarray, np.ndarray]:
    frame = qb._frame(rows, 7)
    x = frame[qb.INPUTS].to_numpy()
    labels = frame["label"].to_numpy()
    if kind == "drifted":
        # both inputs moved along the model's decision boundary (2.5 x 0.9 = 1.5 x 1.5): the
        # scores, hence each class's recall, stay as they were, and the labels are the same
        # world's, so it is drift with no quality loss (moving amount alone moved the recall
        # of class 0 with the positive rate, a quality alarm of its own)
        x = x + np.array([0.9, 1.5])
        p = 1 / (1 + np.exp(-(2.5 * x[:, 0] - 1.5 * x[:, 1])))
        labels = np.random.default_rng(5).uniform(0, 1, rows) < p
    if kind == "quality":
        labels = np.random.default_rng(3).uniform(0, 1, rows) < labels.mean()
    return x, labels


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A home with ``fraud`` registered once (``qb._register``) and that version: each test
    works on a copy, as registering it again would give the same version of the same model."""
    from mlpipe.config import Settings

    root = tmp_path_factory.mktemp("verdict-template")
    return root, qb._register(Settings(home=root), root)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
@pytest.mark.parametrize(
    ("kind", "verdict"), [("clean", "ok"), ("drifted", "drift"), ("quality", "quality")]
)
def test_the_html_verdict_is_the_cli_verdict(
    home: Path,
    registered: tuple[Path, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    kind: str,
    verdict: str,
) -> None:
    from mlpipe.config import load_settings

    template, version = registered
    shutil.copytree(template / ".mlpipe", home / ".mlpipe")
    settings = load_settings()
    x, labels = _window(kind)
    qb._traffic(settings, version, labels, x)
    # the CLI's entry point in this process: the second call does not import it all again
    args = ["monitor", "drift", "fraud", "--window", "1h", "--arm", "champion"]
    code, out, err = run_in_process(monkeypatch, capsys, *args, "--json")
    data = json.loads(out)
    (arm,) = data["arms"]
    assert (data["verdict"], arm["verdict"]) == (verdict, verdict), arm["alarms"]
    assert code == (0 if verdict == "ok" else 1), err
    shown = run_in_process(monkeypatch, capsys, *args)[1]
    for alarm in arm["alarms"]:
        assert f"alarm champion: {alarm}" in shown
    # the quality section as stdout prints it, with the baseline it was judged against
    quality = [line for line in shown.splitlines() if line.startswith("quality champion: ")]
    assert f"quality champion: {arm['quality']['baseline']}" in quality, shown
    assert arm["quality"]["baseline"] == (
        "baseline: auc, recall, precision, log_loss, recall[0] measured at register on "
        "dataset train.parquet (the registration dataset)"
    )
    assert f"status={verdict if kind == 'quality' else 'ok'}" in quality[0]

    pages = [Path(arm["html"])]
    if kind == "quality":
        pages.append(Path(arm["html"]).with_name("champion-quality.html"))
    for page in pages:
        text = _rendered_text(page, tmp_path / "profile")
        head = text.splitlines()[0]
        assert head.startswith(f"fraud champion v{version}: {verdict} — 1500 of 1500 request(s)")
        assert [line for line in text.splitlines() if line.startswith("alarm ")] == [
            f"alarm champion: {alarm}" for alarm in arm["alarms"]
        ]
        assert [line for line in text.splitlines() if line.startswith("quality ")] == quality
        assert "thresholds: calibrated per column for 1% false alarms" in text
        # Evidently's own drift words, which could say the opposite of the verdict, are gone.
        assert "Dataset Drift is" not in text
        assert not re.search(r"^(Not )?Detected$", text, flags=re.M)
        assert "Target: 'target" not in text
