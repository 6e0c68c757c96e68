"""A demo-shaped stack for the monitoring battery, and logged traffic scored in-process.

The stack is what ``mlpipe demo`` builds, smaller: a generated transaction
stream, the fraud feature repository applied and materialized (real Feast),
LightGBM versions on the ``fraud_v2`` FeatureService registered with their
training sets (real MLflow), and a champion with a 20 % canary deployed.

The data ends one day *after* the current hour: the last generated day's
transactions are labelled with the stats snapshot taken at the current hour,
which is what the online store serves now (materialized up to now) and what
the offline store returns as of now. So requests drawn from that day, served
now, carry labels consistent with their served features, and their skew
against the offline store is zero.

Traffic goes through :class:`mlpipe.serving.ScoringPipeline`, what a serving
worker runs behind BentoML (routing, online features, scoring, logging), with
no HTTP in between; each traffic set gets its own prediction log, warehouse
and reports (:func:`isolated`) so windows never mix.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mlpipe import demo, deployments, features, registry, warehouse
from mlpipe.config import Settings, load_settings

MODEL = "fraud"
SERVICE = "fraud_v2"
REPO = Path(__file__).resolve().parents[2] / "feature_repo"
WARMUP_DAYS = 7  # the 7-day aggregates fill during the first week: not representative
CANARY_PERCENT = 20


def now_hour() -> datetime:
    return datetime.now(UTC).replace(minute=0, second=0, microsecond=0)


def feature_repo(
    settings: Settings, name: str, *, customers: int, days: int, **shift: float
) -> tuple[Settings, demo.GeneratedData]:
    """Copy the repository to ``home/name``, generate data, apply and materialize up to now."""
    shutil.copytree(
        REPO, settings.home / name, ignore=shutil.ignore_patterns("data", "__pycache__")
    )
    repo = load_settings(home=settings.home, feature_repo=Path(name))
    data = demo.generate(
        repo.feature_repo_path / "data",
        customers=customers,
        days=days,
        end=now_hour() + timedelta(days=1),
        shift=shift or None,
    )
    features.apply(repo)
    features.materialize(repo)
    return repo, data


def training_set(settings: Settings, transactions: Path) -> pd.DataFrame:
    """The point-in-time training set of ``fraud_v2``, without the warm-up week."""
    entities = pd.read_parquet(transactions)
    frame = features.training_set(settings, SERVICE, entities)
    ts = pd.to_datetime(frame["event_timestamp"])
    return frame[ts >= ts.min() + pd.Timedelta(days=WARMUP_DAYS)].reset_index(drop=True)


def register(settings: Settings, frame: pd.DataFrame, name: str, **train: Any) -> str:
    """Train a LightGBM on ``frame`` (``train``: train_lightgbm's options) and register it."""
    import joblib

    inputs = [*features.describe_service(settings, SERVICE).features, "amount"]
    trained = demo.train_lightgbm(frame, inputs, "is_fraud", **train)
    data_path = features.write_dataset(frame, settings.home / "datasets" / f"{name}.parquet")
    model_path = settings.home / "datasets" / f"{name}.joblib"
    joblib.dump(trained.model, model_path)
    info = registry.register(
        settings,
        MODEL,
        dataset=data_path,
        model_path=model_path,
        feature_service=SERVICE,
        label="is_fraud",
        metrics=trained.metrics,
    )
    return info.version


def shuffled(frame: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """The same rows with the labels permuted: a model trained on it cannot find fraud."""
    labels = np.random.default_rng(seed).permutation(frame["is_fraud"].to_numpy())
    return frame.assign(is_fraud=labels)


@dataclass(frozen=True)
class Requests:
    """Requests drawn from the last generated day, and the true label of each."""

    bodies: list[dict[str, Any]]
    labels: np.ndarray


def last_day_requests(
    data: demo.GeneratedData, n: int, *, seed: int, prefix: str, amount_factor: float = 1.0
) -> Requests:
    """``n`` requests (with replacement) from the last generated day of ``data``'s transactions."""
    columns = ["customer_id", "event_timestamp", "amount", "is_fraud"]
    frame = pd.read_parquet(data.transactions, columns=columns)
    since = pd.Timestamp(data.end - timedelta(days=1))
    day = frame[pd.to_datetime(frame["event_timestamp"], utc=True) >= since]
    sample = day.sample(n=n, replace=True, random_state=seed)
    pairs = zip(sample["customer_id"], sample["amount"], strict=True)
    bodies = [
        {
            "model": MODEL,
            "request_id": f"{prefix}-{i}",
            "entity": {"customer_id": int(cid)},
            "features": {"amount": round(float(amount) * amount_factor, 2)},
        }
        for i, (cid, amount) in enumerate(pairs)
    ]
    return Requests(bodies, sample["is_fraud"].to_numpy())


def isolated(settings: Settings, name: str, feature_repo: Path | None = None) -> Settings:
    """The shared registry, control plane and null cache; an own log, warehouse and reports."""
    folder = settings.home / "windows" / name
    folder.mkdir(parents=True, exist_ok=True)
    return load_settings(
        home=settings.home,
        feature_repo=feature_repo or settings.feature_repo,
        predlog_dir=folder / "predlog",
        reports_dir=folder / "reports",
        warehouse_url=f"duckdb:///{folder / 'warehouse.duckdb'}",
    )


def score(window: Settings, loader: Any, requests: Requests, batch: int = 500) -> list[dict]:
    """Score every request through the serving pipeline; rows land in ``window``'s log."""
    from mlpipe.predlog import open_sink
    from mlpipe.serving import PredictRequest, ScoringPipeline

    sink = open_sink(window, "battery")
    pipeline = ScoringPipeline(window, loader, sink)
    answers: list[dict] = []
    try:
        for start in range(0, len(requests.bodies), batch):
            chunk = requests.bodies[start : start + batch]
            answers.extend(pipeline.predict_batch([PredictRequest(**b) for b in chunk]))
    finally:
        pipeline.close()
        sink.close()
    assert all("score" in a for a in answers), answers[:3]
    return answers


def load_labels(window: Settings, requests: Requests, flip: np.ndarray | None = None) -> None:
    """Load each request's outcome into ``window``'s warehouse (``flip``: rows to invert)."""
    labels = requests.labels.copy()
    if flip is not None:
        labels[flip] = 1 - labels[flip]
    ids = [b["request_id"] for b in requests.bodies]
    path = window.home / "windows" / f"labels-{ids[0]}.csv"
    pd.DataFrame({"request_id": ids, "label": labels}).to_csv(path, index=False)
    warehouse.sync(window)
    warehouse.load_outcomes(window, path)


def first_rows(source: Settings, dest: Settings, n: int) -> None:
    """Copy the first ``n`` logged rows of ``source``'s log into ``dest``'s (a smaller window)."""
    lines: list[bytes] = []
    for segment in sorted(source.predlog_path.glob("*.jsonl")):
        lines.extend(segment.read_bytes().splitlines(keepends=True))
    dest.predlog_path.mkdir(parents=True, exist_ok=True)
    (dest.predlog_path / "window.jsonl").write_bytes(b"".join(lines[:n]))


def deploy(settings: Settings, canary: str, champion: str | None = None) -> None:
    """Run ``canary`` on a 20 % sticky split (after making ``champion`` the champion)."""
    if champion is not None:
        deployments.deploy(settings, MODEL, champion, reason="battery")
    deployments.deploy(settings, MODEL, canary, canary=CANARY_PERCENT, reason="battery")
