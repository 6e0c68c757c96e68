"""``mlpipe shadow analyze`` through the CLI's entry point (in this process), over the real
warehouse."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlpipe import warehouse
from mlpipe.predlog import ENCODER, PredictionRecord

pytestmark = pytest.mark.integration


def _log(settings: Any, rows: int, blind_shadow: bool, tenant: str = "t", seed: int = 0) -> None:
    """Champion answers and a shadow answer per request (same request id), with labels."""
    rng = np.random.default_rng(seed)
    logit = rng.normal(-2.5, 1.5, rows)
    shadow_logit = rng.normal(-2.5, 0.3, rows) if blind_shadow else logit
    truth = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(int)
    now, records = time.time() - 5, []
    for i in range(rows):
        for arm, version, z, latency in (
            ("champion", "1", logit, 3.0),
            ("shadow", "2", shadow_logit, 7.0),
        ):
            score = float(1 / (1 + np.exp(-z[i])))
            records.append(
                PredictionRecord(
                    request_id=f"q{i}", ts=now - i * 0.01, tenant=tenant, model="fraud",
                    version=version, arm=arm, generation=1,  # type: ignore[arg-type]
                    entity_key=f"customer_id={i % 120}", entity={"customer_id": i % 120},
                    features={"amount": float(i)}, score=score, label=int(score >= 0.5),
                    latency_ms=latency,
                )
            )  # fmt: skip
    log = settings.predlog_path / f"shadow-{tenant}.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))
    warehouse.sync(settings)
    labels = settings.home / "labels.csv"
    pd.DataFrame({"request_id": [f"q{i}" for i in range(rows)], "label": truth}).to_csv(
        labels, index=False
    )
    warehouse.load_outcomes(settings, labels, tenant=tenant)


def test_a_blind_shadow_fails_with_its_largest_disagreements_html_and_json(
    home: Path, settings: Any, cli_in_process: Any
) -> None:
    _log(settings, 800, blind_shadow=True)
    result = cli_in_process("shadow", "analyze", "fraud", "--top", "3")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "fraud: shadow v2 vs champion v1 on 800 paired request(s)" in result.stdout
    assert "verdict: fail;" in result.stdout and "largest disagreements" in result.stdout
    (entry,) = warehouse.list_reports(settings, model="fraud", kind="shadow")
    assert entry.verdict == "fail" and entry.version == "2" and entry.arm == "shadow"
    document = json.loads(Path(entry.path).read_text())
    failed = {c["name"] for c in document["checks"] if c["passed"] is False}
    assert {"paired_score", "auc"} <= failed
    top = document["disagreements"]
    assert len(top) == 3 and all(d["request_id"] in result.stdout for d in top)
    assert document["latency_ms"]["shadow_p50"] == 7.0 and document["label_agreement"] < 1
    page = Path(entry.path).with_name("shadow.html").read_text()
    assert top[0]["request_id"] in page


def test_the_same_model_in_shadow_passes(home: Path, settings: Any) -> None:
    from mlpipe import monitoring

    _log(settings, 400, blind_shadow=False)
    result = monitoring.analyze_shadow(settings, "fraud", "1h")
    assert result.verdict == "pass" and result.exit_code == 0
    assert result.label_agreement == 1.0 and result.score_delta["max_abs"] == 0.0
    assert (result.champion_version, result.shadow_version) == ("1", "2")


def test_two_tenants_sending_the_same_ids_do_not_poison_the_shadow(
    home: Path, settings: Any
) -> None:
    from mlpipe import monitoring

    _log(settings, 200, blind_shadow=False, tenant="a", seed=0)
    _log(settings, 200, blind_shadow=False, tenant="b", seed=1)  # the same ids, other answers
    result = monitoring.analyze_shadow(settings, "fraud", "1h")
    assert (result.paired_requests, result.unpaired_shadow_rows) == (400, 0)
    assert result.verdict == "pass" and result.score_delta["max_abs"] == 0.0


def test_a_model_without_logs_or_a_bad_window_is_one_line_exit_2_and_records_nothing(
    home: Path, settings: Any, cli_in_process: Any
) -> None:
    _log(settings, 10, blind_shadow=False)
    missing = cli_in_process("shadow", "analyze", "nope")
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1] == (
        "error: model 'nope' has no logged predictions (the warehouse has: fraud)"
    )
    bad = cli_in_process("shadow", "analyze", "fraud", "--window", "soon")
    assert bad.returncode == 2 and "soon" in bad.stderr and "Traceback" not in bad.stderr
    assert warehouse.list_reports(settings, kind="shadow") == []


def _iris_shadow(settings: Any, rows: int) -> tuple[Any, Any, pd.DataFrame]:
    """Two iris versions with named classes registered; champion v1 and shadow v2 answer the
    same ``rows`` requests (logged as serving logs them); the species loaded as outcomes."""
    import joblib
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    from mlpipe import registry

    bunch = load_iris(as_frame=True)
    frame = bunch.frame.rename(columns=lambda c: c.replace(" (cm)", "").replace(" ", "_"))
    frame["target"] = np.asarray(bunch.target_names)[frame["target"].to_numpy()]
    data = settings.home / "iris.csv"
    frame.to_csv(data, index=False)
    inputs = [c for c in frame.columns if c != "target"]
    fitted = []
    for c in (1.0, 0.01):  # the shadow: heavily regularised, it blurs versicolor/virginica
        model = LogisticRegression(C=c, max_iter=2000).fit(frame[inputs], frame["target"])
        path = settings.home / f"iris-{c}.joblib"
        joblib.dump(model, path)
        registry.register(settings, "iris", dataset=data, model_path=path, label="target")
        fitted.append(model)
    traffic = frame.sample(rows, replace=True, random_state=0).reset_index(drop=True)
    now, records = time.time() - 5, []
    for (arm, version), model in zip((("champion", "1"), ("shadow", "2")), fitted, strict=True):
        proba = model.predict_proba(traffic[inputs])
        for i, p in enumerate(proba):
            records.append(
                PredictionRecord(
                    request_id=f"q{i}", ts=now - i * 0.01, tenant="t", model="iris",
                    version=version, arm=arm, generation=1,  # type: ignore[arg-type]
                    entity_key=f"id={i % 150}", entity={"id": i % 150},
                    features={k: float(traffic[k].iloc[i]) for k in inputs},
                    score=float(p.max()), label=int(p.argmax()), latency_ms=2.0,
                    probabilities=[float(x) for x in p],
                )
            )  # fmt: skip
    log = settings.predlog_path / "iris.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))
    warehouse.sync(settings)
    labels = settings.home / "labels.csv"
    pd.DataFrame({"request_id": [f"q{i}" for i in range(rows)], "label": traffic["target"]}).to_csv(
        labels, index=False
    )
    warehouse.load_outcomes(settings, labels, tenant="t")
    return fitted[0], fitted[1], traffic


def test_a_multiclass_shadow_with_named_classes_shows_outcomes_classes_and_per_class_figures(
    home: Path, settings: Any, cli_in_process: Any
) -> None:
    """Issue 28 item 6: the species as outcomes, class names, agreement and confusion per
    class, a probability delta per class (no score delta), and a page headed "shadow"."""
    champion, shadow, traffic = _iris_shadow(settings, 300)
    result = cli_in_process("shadow", "analyze", "iris", "--json")
    assert result.returncode in (0, 1), result.stdout + result.stderr
    doc = json.loads(result.stdout)
    names = ["setosa", "versicolor", "virginica"]
    assert doc["labelled_requests"] == 300 and doc["score_delta"] == {}
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["accuracy"]["passed"] is not None and "shadow" in checks["accuracy"]
    assert "canary" not in json.dumps(doc["checks"])
    inputs = [c for c in traffic.columns if c != "target"]
    ch_pred = champion.predict(traffic[inputs])
    sh_pred = shadow.predict(traffic[inputs])
    assert checks["accuracy"]["champion"] == pytest.approx(np.mean(ch_pred == traffic["target"]))
    per_class = {r["class"]: r for r in doc["class_agreement"]}
    assert list(per_class) == names
    for name in names:
        mine = ch_pred == name
        assert per_class[name]["champion"] == mine.sum()
        assert per_class[name]["both"] == (mine & (sh_pred == name)).sum()
    confusion = pd.crosstab(pd.Categorical(ch_pred, names), pd.Categorical(sh_pred, names))
    assert [[r[n] for n in names] for r in doc["confusion"]] == confusion.to_numpy().tolist()
    delta = shadow.predict_proba(traffic[inputs]) - champion.predict_proba(traffic[inputs])
    deltas = {r["class"]: r for r in doc["probability_delta"]}
    assert list(deltas) == names
    for k, name in enumerate(names):
        assert deltas[name]["mean"] == pytest.approx(delta[:, k].mean())
        assert deltas[name]["max_abs"] == pytest.approx(np.abs(delta[:, k]).max())
    top = doc["disagreements"][0]
    assert top["outcome"] in names and top["champion_label"] in names
    assert top["delta_class"] in names and top["probability_delta"] == pytest.approx(
        np.abs(delta).max()
    )
    page = Path(doc["html_path"]).read_text()
    assert "<th>shadow</th>" in page and "<th>canary</th>" not in page and "versicolor" in page
    text = cli_in_process("shadow", "analyze", "iris")
    assert "labelled: 300 of 300" in text.stdout and "probability delta per class" in text.stdout
    assert "score delta" not in text.stdout and "virginica" in text.stdout
