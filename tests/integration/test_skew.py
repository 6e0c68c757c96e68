"""Train/serve skew against a real Feast repository: served values come from the online store.

A copy of ``feature_repo/`` with a tiny generated data set (30 customers, 3 days)
is applied and materialized; on a copy of the session's registry template
(``fraud`` v1, v2) a v3 is registered against the ``fraud_v2`` FeatureService.
Prediction rows log what the online store served, except that one feature is
perturbed on half the rows, as a serving-side bug would: ``monitor skew`` flags
that feature and no other.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mlpipe import demo, features, monitoring, registry, warehouse
from mlpipe.config import load_settings
from mlpipe.predlog import ENCODER, PredictionRecord

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2] / "feature_repo"
SKEWED = "amount_mean_7d"
VERSION = "3"  # v1 and v2 (the template's) have no feature service
LATER = "4"  # another version on the same service: promoted, then rolled back
# The data ends an hour before the current hour, so every request logged "now" is after
# the last snapshot: online and offline-as-of-request hold the same values.
DATA_END = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)


@pytest.fixture(scope="module")
def feast_home(tmp_path_factory: pytest.TempPathFactory, registry_template: Path) -> Path:
    """A home with an applied, materialized feature repo and ``fraud`` v3 on ``fraud_v2``."""
    import joblib
    from lightgbm import LGBMClassifier

    from mlpipe.config import Settings

    root = tmp_path_factory.mktemp("skew")
    shutil.copytree(
        registry_template / ".mlpipe", root / ".mlpipe"
    )  # MLflow's DB is slow to create
    shutil.copytree(
        REPO, root / "feature_repo", ignore=shutil.ignore_patterns("data", "__pycache__")
    )
    settings = Settings(home=root)
    demo.generate(settings.feature_repo_path / "data", customers=30, days=3, end=DATA_END)
    features.apply(settings)
    features.materialize(settings, end=DATA_END + timedelta(minutes=5))
    inputs = [*features.describe_service(settings, "fraud_v2").features, "amount"]
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({name: rng.gamma(2.0, 3.0, 200) for name in inputs})
    frame["label"] = (frame["amount"] > frame["amount"].median()).astype(int)
    model = LGBMClassifier(n_estimators=5, verbose=-1).fit(frame[inputs], frame["label"])
    joblib.dump(model, root / "model.joblib")
    frame.to_parquet(root / "train.parquet", index=False)
    info = registry.register(
        settings,
        "fraud",
        dataset=root / "train.parquet",
        model_path=root / "model.joblib",
        feature_service="fraud_v2",
    )
    assert info.version == VERSION
    later = LGBMClassifier(n_estimators=6, verbose=-1).fit(frame[inputs], frame["label"])
    joblib.dump(later, root / "later.joblib")
    info = registry.register(
        settings,
        "fraud",
        dataset=root / "train.parquet",
        model_path=root / "later.joblib",
        feature_service="fraud_v2",
    )
    assert info.version == LATER
    return root


@pytest.fixture
def settings(feast_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The shared feature repo and registry; a fresh warehouse, prediction log and reports."""
    for key in list(__import__("os").environ):
        if key.startswith("MLPIPE_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("MLPIPE_HOME", str(feast_home))
    monkeypatch.setenv("MLPIPE_WAREHOUSE_URL", f"duckdb:///{tmp_path / 'warehouse.duckdb'}")
    monkeypatch.setenv("MLPIPE_PREDLOG_DIR", str(tmp_path / "predlog"))
    monkeypatch.setenv("MLPIPE_REPORTS_DIR", str(tmp_path / "reports"))
    return load_settings()


def _served_traffic(
    settings, name: str, ts: list[float], perturb: bool, version: str = VERSION
) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Log one request per ts answered by ``version``, features read from the online store;
    returns the true values."""
    online = features.OnlineFeatures(settings, "fraud_v2", cache_ttl_s=0, cache_size=0)
    customers = [i % 31 for i in range(len(ts))]  # customer 30 does not exist: defaults
    rows = online.get_many([{"customer_id": c} for c in customers])
    records = []
    for i, (customer, row, at) in enumerate(zip(customers, rows, ts, strict=True)):
        values = {**row.values, "amount": 42.0 + i}
        if perturb and i % 2 == 0:
            # e.g. serving computes the mean over 6 days where training used 7
            values[SKEWED] = values[SKEWED] * 7 / 6 + 1.0
        records.append(
            PredictionRecord(
                request_id=f"{name}-{i}",
                ts=at,
                tenant="t",
                model="fraud",
                version=version,
                arm="champion",
                generation=1,
                entity_key=f"customer_id={customer}",
                entity={"customer_id": customer},
                features=values,
                score=0.5,
                label=0,
                latency_ms=3.0,
                features_missing=list(row.missing),
            )
        )
    path = settings.predlog_path / f"{name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))
    return rows[0].values


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from mlpipe_cli import main

    old = sys.argv
    sys.argv = ["mlpipe", *args]
    try:
        with pytest.raises(SystemExit) as exit_info:
            main.run()
    finally:
        sys.argv = old
    captured = capsys.readouterr()
    return int(exit_info.value.code or 0), captured.out, captured.err


def test_a_skewed_online_feature_is_found_and_only_that_one(settings, capsys) -> None:  # type: ignore[no-untyped-def]
    now = time.time()
    # Clean traffic 10..7 minutes ago (the first row 5 s inside the window, so rounding
    # the timestamp to the warehouse's microseconds cannot move it out), skewed traffic
    # in the last 2 minutes.
    _served_traffic(settings, "clean", [now - 595 + 3 * i for i in range(62)], perturb=False)
    _served_traffic(settings, "skewed", [now - 120 + i for i in range(62)], perturb=True)

    clean = monitoring.skew(
        settings, "fraud", "5m", end=datetime.fromtimestamp(now - 300, UTC).replace(tzinfo=None)
    )
    assert clean.verdict == "ok" and clean.exit_code == 0
    assert clean.rows_compared == 62
    assert {f.feature for f in clean.features} == set(
        features.describe_service(settings, "fraud_v2").features
    )
    assert all(f.mismatched == 0 for f in clean.features)
    assert [s.column for s in clean.skipped] == ["amount"]  # request-time: no offline definition

    code, out, err = _cli(["monitor", "skew", "fraud", "--window", "5m", "--json"], capsys)
    assert code == 1, err
    data = json.loads(out)
    assert data["verdict"] == "skew" and data["exit_code"] == 1
    assert data["skewed_features"] == [SKEWED]
    assert data["rows_compared"] == 62
    rates = {f["feature"]: f["mismatch_rate"] for f in data["features"]}
    assert rates[SKEWED] == pytest.approx(31 / 62)
    assert all(rate == 0 for name, rate in rates.items() if name != SKEWED)
    (example, *_) = next(f for f in data["features"] if f["feature"] == SKEWED)["examples"]
    assert example["served"] == pytest.approx(example["offline"] * 7 / 6 + 1.0)
    entry = warehouse.list_reports(settings, model="fraud", kind="skew")[0]
    assert entry.verdict == "skew" and entry.summary["skewed"] == [SKEWED]
    assert json.loads(Path(data["report_path"]).read_text())["skewed_features"] == [SKEWED]

    code, out, err = _cli(["monitor", "skew", "fraud", "--window", "5m", "--sample", "20"], capsys)
    assert code == 1
    assert f"{SKEWED}" in out and "verdict: skew" in out
    assert "skipped amount" in err.replace("[yellow]", "").replace("[/yellow]", "")


def test_an_empty_window_is_no_data_and_an_unknown_model_exits_2(settings, capsys) -> None:  # type: ignore[no-untyped-def]
    _served_traffic(settings, "old", [time.time() - 7200], perturb=False)
    verdict = monitoring.skew(settings, "fraud", "1h")
    assert verdict.verdict == "no_data" and verdict.exit_code == 0
    code, _, err = _cli(["monitor", "skew", "nosuch", "--window", "1h"], capsys)
    assert code == 2 and "nosuch" in err


def test_each_version_is_compared_on_its_own_rows(settings, capsys) -> None:  # type: ignore[no-untyped-def]
    """Issue 28 item 3: v3 served, v4 promoted (its serving skewed one feature), rolled back to
    v3: each version is reported with its own rows, and v4's skew is v4's, not pooled."""
    now = time.time()
    _served_traffic(settings, "v3-before", [now - 590 + 2 * i for i in range(62)], perturb=False)
    promoted = [now - 300 + 2 * i for i in range(62)]
    _served_traffic(settings, "v4-promoted", promoted, perturb=True, version=LATER)
    _served_traffic(settings, "v3-rolled-back", [now - 60 + i for i in range(31)], perturb=False)
    result = monitoring.skew(settings, "fraud", "15m")
    assert [(v.version, v.rows, v.compared, v.verdict) for v in result.versions] == [
        (VERSION, 93, 93, "ok"),
        (LATER, 62, 62, "skew"),
    ]
    assert result.verdict == "skew" and result.rows_compared == 155
    rates = {(f.version, f.feature): f.mismatch_rate for f in result.features}
    assert rates[LATER, SKEWED] == pytest.approx(31 / 62)
    assert all(rate == 0 for (version, _), rate in rates.items() if version == VERSION)
    entries = warehouse.list_reports(settings, model="fraud", kind="skew")
    assert {(e.version, e.verdict, e.summary["rows"]) for e in entries} == {
        (VERSION, "ok", 93),
        (LATER, "skew", 62),
    }
    code, out, _ = _cli(["monitor", "skew", "fraud", "--window", "15m"], capsys)
    assert code == 1
    assert f"fraud v{VERSION}: ok — 93 of 93 request(s) compared" in out
    assert f"fraud v{LATER}: skew — 62 of 62 request(s) compared" in out
    args = ["monitor", "skew", "fraud", "--window", "15m", "--version", VERSION, "--json"]
    code, out, _ = _cli(args, capsys)
    data = json.loads(out)
    assert (code, data["verdict"], data["rows_compared"]) == (0, "ok", 93)
    assert [v["version"] for v in data["versions"]] == [VERSION]
    assert "62 row(s) of other versions left out (v3 only)" in data["notes"]
