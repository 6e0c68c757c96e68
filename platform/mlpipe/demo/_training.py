"""Training the example fraud model (LightGBM) on a point-in-time training set."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlpipe.errors import InvalidInput

if TYPE_CHECKING:
    import pandas as pd


WARMUP_DAYS = 7  # the longest feature aggregate's window (the 7-day counts and maxima)


def without_warmup(frame: pd.DataFrame, days: int = WARMUP_DAYS) -> pd.DataFrame:
    """The rows after the first ``days`` of ``event_timestamp``: representative training data.

    In the first week of the generated history the 7-day aggregates are still
    filling (a customer's ``txn_count_7d`` counts only the days so far), so
    rows from it look like no request served later. Training on them, and
    keeping them in the version's drift reference, makes a clean window drift
    on those aggregates. A frame without timestamps is returned as it is.
    """
    import pandas as pd

    if "event_timestamp" not in frame or frame.empty:
        return frame
    ts = pd.to_datetime(frame["event_timestamp"])
    return frame[ts >= ts.min() + pd.Timedelta(days=days)].reset_index(drop=True)


@dataclass(frozen=True)
class TrainedModel:
    model: Any
    features: list[str]
    metrics: dict[str, float]


def train_lightgbm(
    frame: pd.DataFrame,
    features: list[str],
    label: str,
    *,
    n_estimators: int = 100,
    seed: int = 0,
    holdout: float = 0.2,
) -> TrainedModel:
    """Fit on the earliest rows, report AUC and log-loss on the latest ``holdout`` share.

    Rows are taken in ``event_timestamp`` order when the frame has one, so the
    evaluation never sees the past through the future. Raises InvalidInput for
    missing columns or a single-class training set.
    """
    from lightgbm import LGBMClassifier
    from sklearn.metrics import log_loss, precision_score, recall_score, roc_auc_score

    missing = [c for c in [*features, label] if c not in frame]
    if missing:
        raise InvalidInput(f"training set lacks column(s) {', '.join(missing)}")
    if "event_timestamp" in frame:
        frame = frame.sort_values("event_timestamp", kind="stable")
    cut = int(len(frame) * (1 - holdout))
    train, test = frame.iloc[:cut], frame.iloc[cut:]
    if train[label].nunique() < 2 or test[label].nunique() < 2:
        raise InvalidInput("the training set needs both classes in its train and holdout parts")
    model = LGBMClassifier(
        n_estimators=n_estimators, learning_rate=0.05, random_state=seed, verbose=-1
    )
    model.fit(train[features], train[label])
    proba: Any = model.predict_proba(test[features])
    scores = proba[:, 1]
    flagged = (scores >= 0.5).astype(int)  # the registered threshold's default
    metrics = {
        "auc": float(roc_auc_score(test[label], scores)),
        "logloss": float(log_loss(test[label], scores)),
        "recall": float(recall_score(test[label], flagged, zero_division=0)),
        "precision": float(precision_score(test[label], flagged, zero_division=0)),
        "train_rows": float(len(train)),
    }
    return TrainedModel(model=model, features=list(features), metrics=metrics)
