"""Training the example fraud model (LightGBM) on a point-in-time training set."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlpipe.errors import InvalidInput

if TYPE_CHECKING:
    import pandas as pd


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
    from sklearn.metrics import log_loss, roc_auc_score

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
    metrics = {
        "auc": float(roc_auc_score(test[label], scores)),
        "logloss": float(log_loss(test[label], scores)),
        "train_rows": float(len(train)),
    }
    return TrainedModel(model=model, features=list(features), metrics=metrics)
