"""Drift and canary analysis on generated traffic: real DuckDB, real Evidently, the real CLI."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mlpipe import monitoring, warehouse
from mlpipe.config import load_settings
from mlpipe.predlog import ENCODER, PredictionRecord

pytestmark = pytest.mark.integration
FEATURES = ["a", "b", "c", "d"]


def _frame(n: int, seed: int, shift: tuple[str, ...] = ()) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    f = pd.DataFrame({k: rng.normal(0, 1, n) for k in FEATURES})
    for k in shift:
        f[k] += 1.5
    f["label"] = (f["c"] > 0).astype(int)  # the prediction depends on c only
    return f


def _traffic(
    settings,
    n,
    seed,
    arm="champion",
    version="1",
    shift=(),
    model="fraud",
    frame=None,
    status="ok",
    latency=5.0,
    name=None,
):
    f = frame if frame is not None else _frame(n, seed, shift)
    now = time.time() - 30
    records = [
        PredictionRecord(
            request_id=f"{arm}-{seed}-{i}",
            ts=now - i,
            tenant="t",
            model=model,
            version=version,
            arm=arm,
            generation=1,
            entity_key=f"customer_id={i}",
            entity={"customer_id": i},
            features={
                k: (None if pd.isna(v) else float(v))
                for k, v in f.drop(columns="label").iloc[i].items()
            },
            score=float(1 / (1 + np.exp(-f["c"].iloc[i]))) if "c" in f else 0.5,
            label=int(f["label"].iloc[i]),
            latency_ms=latency,
            status=status,
        )
        for i in range(len(f))
    ]
    path = settings.predlog_path / (name or f"{arm}-{seed}.jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))
    return records


@pytest.fixture
def settings(tmp_path, monkeypatch):
    monkeypatch.setenv("MLPIPE_HOME", str(tmp_path))
    return load_settings(home=tmp_path)


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    """Run the real entry point (``mlpipe_cli.main.run``) with this worker's commands registered."""
    from mlpipe_cli import main
    from mlpipe_cli.commands import monitor as monitor_cmd
    from mlpipe_cli.commands import warehouse as warehouse_cmd

    names = {g.name for g in main.app.registered_groups}
    if "warehouse" not in names:
        warehouse_cmd.register(main.app)
    if "monitor" not in names:
        monitor_cmd.register(main.app)
    old = sys.argv
    sys.argv = ["mlpipe", *args]
    try:
        with pytest.raises(SystemExit) as exit_info:
            main.run()
    finally:
        sys.argv = old
    captured = capsys.readouterr()
    return int(exit_info.value.code or 0), captured.out, captured.err


def test_known_shift_in_two_features_is_found_and_only_those(settings, monkeypatch):
    _traffic(settings, 600, 1, shift=("a", "b"))
    verdict = monitoring.drift(settings, "fraud", "24h", reference_frame=_frame(800, 99))
    (arm,) = verdict.arms
    assert arm.drifted_features == ["a", "b"]
    assert verdict.verdict == "drift" and verdict.exit_code == 1
    summary = json.loads((Path(verdict.report_dir) / "summary.json").read_text())
    assert summary["arms"][0]["drifted_features"] == ["a", "b"]
    evidently_json = json.loads(Path(arm.json).read_text())
    failed = {
        t["metric_config"]["params"].get("column")
        for t in evidently_json["tests"]
        if t["status"] == "FAIL" and t["metric_config"]["params"].get("column")
    }
    assert failed == {"a", "b"}  # the report's JSON says what the CLI printed
    assert Path(arm.html).read_text().lstrip().lower().startswith("<!doctype html")
    assert warehouse.list_reports(settings, model="fraud", kind="drift")[0].verdict == "drift"


def test_cli_drift_exit_codes_json_and_window_reference(settings, capsys):
    # reference traffic two days ago, current traffic now: unshifted → exit 0
    old = _frame(500, 5)
    records = _traffic(settings, 500, 5, frame=old, name="old.jsonl")
    shifted = [
        PredictionRecord(
            **{
                **{f: getattr(r, f) for f in r.__struct_fields__},
                "ts": r.ts - 2 * 86400,
                "request_id": "old-" + r.request_id,
            }
        )
        for r in records
    ]
    (settings.predlog_path / "old.jsonl").write_bytes(
        b"".join(ENCODER.encode(r) + b"\n" for r in shifted)
    )
    _traffic(settings, 500, 6)
    code, out, err = _cli(
        ["monitor", "drift", "fraud", "--window", "24h", "--reference", "window:3d", "--json"],
        capsys,
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["verdict"] == "ok" and data["arms"][0]["drifted_features"] == []
    code, out, err = _cli(
        ["monitor", "drift", "fraud", "--window", "24h", "--reference", "window:3d"], capsys
    )
    assert code == 0 and "verdict: ok" in out and "column" in out  # the verdict beside the table


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["monitor", "drift", "nosuch", "--reference", "window:1d"], "no logged predictions"),
        (["monitor", "drift", "fraud", "--window", "yesterday"], "bad window"),
        (["monitor", "drift", "fraud", "--reference", "last-week"], "bad reference"),
        (["monitor", "drift", "fraud", "--arm", "blue"], "unknown arm"),
        (["outcomes", "load", "missing.csv"], "does not exist"),
        (["warehouse", "query", "DROP TABLE predictions"], "query failed"),
        (["canary", "analyze", "fraud", "--window", "1x"], "bad window"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_changes_nothing(settings, capsys, args, match):
    _traffic(settings, 50, 1)
    warehouse.sync(settings)
    before = warehouse.query(
        settings, "SELECT (SELECT count(*) FROM predictions), (SELECT count(*) FROM reports)"
    ).rows
    code, out, err = _cli(args, capsys)
    assert code == 2, (out, err)
    assert match in err and "Traceback" not in err
    assert (
        warehouse.query(
            settings, "SELECT (SELECT count(*) FROM predictions), (SELECT count(*) FROM reports)"
        ).rows
        == before
    )


def test_awkward_data_never_crashes(settings):
    n = 300
    rng = np.random.default_rng(3)
    cur = pd.DataFrame(
        {
            "a": rng.normal(0, 1, n),
            "empty": [np.nan] * n,
            "single": [1.0] * n,
            "typed": rng.normal(0, 1, n),
            "infs": rng.normal(0, 1, n),  # JSON has no inf: the log holds null for it
            "c": rng.normal(0, 1, n),
        }
    )
    cur["label"] = (cur["c"] > 0).astype(int)
    _traffic(settings, n, 3, frame=cur)
    for ref_rows in (200, 1500):  # Evidently switches tests above 1000 reference rows
        rng = np.random.default_rng(ref_rows)
        ref = pd.DataFrame(
            {
                "a": rng.normal(0, 1, ref_rows),
                "empty": rng.normal(0, 1, ref_rows),
                "single": [1.0] * ref_rows,
                "typed": rng.choice(["x", "y"], ref_rows),  # text in the reference, numbers logged
                "infs": np.r_[rng.normal(0, 1, ref_rows - 2), [np.inf, -np.inf]],
                "c": rng.normal(0, 1, ref_rows),
                "only_in_reference": rng.normal(0, 1, ref_rows),
            }
        )
        ref["label"] = (ref["c"] > 0).astype(int)
        ref["score"] = 1 / (1 + np.exp(-ref["c"]))  # the version's own scores on its reference
        verdict = monitoring.drift(settings, "fraud", "24h", reference_frame=ref)
        (arm,) = verdict.arms
        reasons = {s.column: s.reason for s in arm.skipped}
        assert set(reasons) == {"empty", "single", "typed", "only_in_reference"}, reasons
        assert "no values" in reasons["empty"] and "one value" in reasons["single"]
        assert (
            "type differs" in reasons["typed"]
            and "not in the logged" in reasons["only_in_reference"]
        )
        assert any("±inf" in note for note in arm.notes)
        tested = {c.column for c in arm.columns if c.kind != "missing"}
        assert tested == {"a", "c", "infs", "prediction", "positive_rate"}
        assert arm.missing_share_drifted == ["empty"]  # logged all null: its own signal
        assert verdict.verdict in ("ok", "drift")
    # a window with no rows at all: a verdict, not a crash
    empty = monitoring.drift(
        settings,
        "fraud",
        "24h",
        end=pd.Timestamp("2001-01-01").to_pydatetime(),
        reference_frame=_frame(100, 1),
    )
    assert empty.verdict == "no_data" and empty.exit_code == 0


_SYNC_LOOP = """
import sys, time
from pathlib import Path
from mlpipe import warehouse
from mlpipe.config import load_settings
settings = load_settings(home=Path(sys.argv[1]))
src = Path(sys.argv[2]).read_bytes().splitlines(keepends=True)
for i in range(8):
    out = settings.predlog_path / f"more-{i}.jsonl"
    tag = f'"request_id":"m{i}-'.encode()
    out.write_bytes(b"".join(l.replace(b'"request_id":"', tag) for l in src))
    warehouse.sync(settings)
print("synced", flush=True)
"""


def test_concurrent_sync_and_monitor_do_not_hit_the_lock_error(settings, tmp_path):
    import subprocess

    _traffic(settings, 400, 1)
    warehouse.sync(settings)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _SYNC_LOOP,
            str(tmp_path),
            str(settings.predlog_path / "champion-1.jsonl"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    said: list[str] = []
    verdicts = []
    while proc.poll() is None or not verdicts:
        verdicts.append(
            monitoring.drift(
                settings, "fraud", "24h", reference_frame=_frame(300, 9), notify=said.append
            )
        )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert b"synced" in out and b"Could not set lock" not in err
    assert all(v.verdict in ("ok", "drift") for v in verdicts)
    assert warehouse.query(settings, "SELECT count(*) FROM predictions").rows == [(400 * 9,)]


class _Hook(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_alert_webhook_posts_the_verdict(settings, capsys):
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        _traffic(settings, 200, 1)
        _traffic(settings, 200, 2, arm="canary", version="2")
        url = f"http://127.0.0.1:{server.server_port}/hook"
        code, out, err = _cli(
            ["canary", "analyze", "fraud", "--window", "24h", "--alert-webhook", url], capsys
        )
        # 200 unlabelled rows of unregistered versions: no paired or label checks, so the
        # verdict is 'insufficient' (exit 1); the webhook carries the verdict the CLI printed
        sent = _Hook.received[-1]
        assert sent["model"] == "fraud" and sent["verdict"] == "insufficient", sent
        assert code == 1 and "insufficient" in out, (out, err)
        assert "alert sent to http://127.0.0.1:" in err and "/hook" not in err
        code, _, err = _cli(
            [
                "canary",
                "analyze",
                "fraud",
                "--window",
                "24h",
                "--alert-webhook",
                "http://127.0.0.1:1/none",
            ],
            capsys,
        )
        assert code == 3 and "not delivered" in err
    finally:
        server.shutdown()


def test_webhook_urls_are_printed_redacted(settings, capsys):
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    secret = "T0000/B0000/XXXXsecretXXXX"
    try:
        _traffic(settings, 200, 1)
        url = f"http://user:pw@127.0.0.1:{server.server_port}/services/{secret}?token=abc"
        code, out, err = _cli(
            ["monitor", "drift", "fraud", "--reference", "window:3d", "--alert-webhook", url],
            capsys,
        )
        assert code in (0, 1), err
        assert f"alert sent to http://127.0.0.1:{server.server_port}/…" in err
        code, out, err = _cli(
            ["monitor", "drift", "fraud", "--reference", "window:3d"]
            + ["--alert-webhook", f"http://127.0.0.1:1/{secret}"],
            capsys,
        )
        assert code == 3 and "alert to http://127.0.0.1:1/… not delivered" in err
        for text in (out, err):
            assert secret not in text and "token=abc" not in text and "pw@" not in text
    finally:
        server.shutdown()
    assert monitoring.redact_url("https://hooks.slack.com/services/T/B/x") == (
        "https://hooks.slack.com/…"
    )
    assert monitoring.redact_url("https://example.com") == "https://example.com"
    assert monitoring.redact_url("not a url") == "<unparseable URL>"


def _labels(settings, records, accuracy: float, seed: int, path: Path) -> Path:
    rng = np.random.default_rng(seed)
    rows = [(r.request_id, r.label if rng.random() < accuracy else 1 - r.label) for r in records]
    pd.DataFrame(rows, columns=["request_id", "label"]).to_csv(path, index=False)
    return path


@pytest.mark.parametrize(("canary_accuracy", "expected"), [(0.7, "fail"), (0.9, "pass")])
def test_canary_with_labels(settings, tmp_path, canary_accuracy, expected):
    champ = _traffic(settings, 400, 1)
    can = _traffic(settings, 400, 2, arm="canary", version="2")
    warehouse.sync(settings)
    warehouse.load_outcomes(settings, _labels(settings, champ, 0.9, 1, tmp_path / "c.csv"))
    warehouse.load_outcomes(
        settings, _labels(settings, can, canary_accuracy, 2, tmp_path / "k.csv")
    )
    analysis = monitoring.analyze(settings, "fraud", "24h")
    assert analysis.verdict == expected
    auc = next(c for c in analysis.checks if c.name == "auc")  # accuracy is no check (issue 22)
    assert auc.passed is (expected == "pass")
    assert monitoring.latest_canary_verdict(settings, "fraud", "2") == expected


def test_canary_with_20_requests_is_insufficient(settings):
    _traffic(settings, 400, 1)
    _traffic(settings, 20, 2, arm="canary", version="2")
    analysis = monitoring.analyze(settings, "fraud", "24h")
    assert analysis.verdict == "insufficient" and analysis.exit_code == 1
    assert (analysis.champion_requests, analysis.canary_requests) == (400, 20)
    assert monitoring.latest_canary_verdict(settings, "fraud", "2") == "insufficient"
    assert monitoring.latest_canary_verdict(settings, "fraud", "9") is None


def test_canary_with_more_errors_fails(settings):
    _traffic(settings, 300, 1)
    _traffic(settings, 300, 2, arm="canary", version="2", status="error")
    analysis = monitoring.analyze(settings, "fraud", "24h")
    assert analysis.verdict == "fail"
    assert next(c for c in analysis.checks if c.name == "error_rate").passed is False
