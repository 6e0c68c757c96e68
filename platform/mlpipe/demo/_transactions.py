"""A deterministic synthetic transaction stream with fraud labels, for demos and tests.

The stream is built day by day. At the start of each day every customer gets a
snapshot of activity statistics computed from the days before (what the
``customer_stats`` feature view serves); the day's transactions are then drawn and
each one's fraud probability depends on that snapshot, the customer's profile and
the request-time ``amount``. A model trained on point-in-time features can
therefore learn the labels, and one that peeks into the future gains nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from mlpipe.errors import InvalidInput

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

STATS_FEATURES = (
    "txn_count_1d",
    "txn_count_7d",
    "amount_mean_7d",
    "amount_max_7d",
    "chargeback_rate_90d",
)
PROFILE_FEATURES = ("account_age_days", "country_risk")
REQUEST_FEATURES = ("amount",)
SHIFTABLE = STATS_FEATURES + PROFILE_FEATURES + REQUEST_FEATURES
_COUNT_COLUMNS = {"txn_count_1d", "txn_count_7d", "account_age_days"}
_DAY = timedelta(days=1)


@dataclass(frozen=True)
class GeneratedData:
    """What :func:`generate` wrote: the three parquet files and the time range they cover."""

    customer_stats: Path
    customer_profile: Path
    transactions: Path
    start: datetime
    end: datetime
    customers: int
    transaction_count: int
    fraud_rate: float


def generate(
    out_dir: Path | str,
    *,
    customers: int = 500,
    days: int = 30,
    seed: int = 7,
    shift: dict[str, float] | None = None,
    end: datetime | None = None,
) -> GeneratedData:
    """Write ``customer_stats``, ``customer_profile`` and ``transactions`` parquet files.

    The same arguments always give identical files. ``end`` (default: now, floored
    to the hour, UTC) is the time of the last stats snapshot, so features
    materialized from freshly generated data are within their TTL. ``shift`` maps
    a feature name (or ``amount``) to a factor its written values are multiplied
    by, for drift demos; labels are drawn before the shift, so only the named
    columns change. Raises :class:`InvalidInput` for a non-positive size or an
    unknown shift name.
    """
    if customers < 1 or days < 1:
        raise InvalidInput(f"customers and days must be >= 1 (got {customers}, {days})")
    shift = dict(shift or {})
    unknown = sorted(set(shift) - set(SHIFTABLE))
    if unknown:
        raise InvalidInput(
            f"cannot shift {', '.join(unknown)}: known columns are {', '.join(SHIFTABLE)}"
        )
    end = _utc_hour(end)
    start = end - days * _DAY

    stats, profile, txns = _simulate(customers, days, seed, start)
    for frame in (stats, profile, txns):
        for column, factor in shift.items():
            if column in frame:
                scaled = frame[column] * factor
                is_count = column in _COUNT_COLUMNS
                frame[column] = scaled.round().astype("int64") if is_count else scaled

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = ("customer_stats", "customer_profile", "transactions")
    paths = {name: out / f"{name}.parquet" for name in names}
    for name, frame in zip(paths, (stats, profile, txns), strict=True):
        frame.to_parquet(paths[name], index=False)
    return GeneratedData(
        customer_stats=paths["customer_stats"],
        customer_profile=paths["customer_profile"],
        transactions=paths["transactions"],
        start=start,
        end=end,
        customers=customers,
        transaction_count=len(txns),
        fraud_rate=float(txns["is_fraud"].mean()) if len(txns) else 0.0,
    )


def _utc_hour(end: datetime | None) -> datetime:
    if end is None:
        return datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    if end.tzinfo is None:
        return end.replace(tzinfo=UTC)
    return end.astimezone(UTC)


def _simulate(
    customers: int, days: int, seed: int, start: datetime
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    ids = np.arange(1, customers + 1, dtype="int64")
    # Latent traits: how active, how big, how risky a customer is.
    risk = rng.normal(0.0, 1.0, customers)
    rate = np.exp(rng.normal(math.log(3.0), 0.5, customers))
    log_amount = rng.normal(math.log(50.0), 0.5, customers)
    age = np.clip(np.exp(rng.normal(math.log(400.0), 1.0, customers)), 1, 4000).astype("int64")
    country_risk = np.clip(0.3 + 0.12 * risk + rng.normal(0.0, 0.1, customers), 0.0, 1.0)

    count = np.zeros((days, customers), dtype="int64")
    total = np.zeros((days, customers))
    peak = np.zeros((days, customers))
    frauds = np.zeros((days, customers), dtype="int64")

    snapshots: list[pd.DataFrame] = []
    txn_parts: list[pd.DataFrame] = []
    for day in range(days + 1):
        snap = _snapshot(day, count, total, peak, frauds)
        snapshots.append(pd.DataFrame({"customer_id": ids, "day": day, **snap}))
        if day == days:
            break
        n = rng.poisson(rate * rng.uniform(0.5, 1.5, customers))
        owner = np.repeat(np.arange(customers), n)
        amount = np.round(np.exp(rng.normal(log_amount[owner], 0.6)), 2)
        offset_s = rng.integers(1, 86_400, owner.size)
        p = _fraud_probability(owner, amount, snap, risk, age, country_risk)
        is_fraud = (rng.uniform(size=owner.size) < p).astype("int64")
        count[day] = n
        np.add.at(total[day], owner, amount)
        np.maximum.at(peak[day], owner, amount)
        np.add.at(frauds[day], owner, is_fraud)
        txn_parts.append(
            pd.DataFrame(
                {
                    "customer_id": ids[owner],
                    "offset_s": offset_s + day * 86_400,
                    "amount": amount,
                    "is_fraud": is_fraud,
                }
            )
        )

    return _frames(start, ids, age, country_risk, snapshots, txn_parts)


def _frames(
    start: datetime,
    ids: np.ndarray,
    age: np.ndarray,
    country_risk: np.ndarray,
    snapshots: list[pd.DataFrame],
    txn_parts: list[pd.DataFrame],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The three source tables, timestamped from ``start``: stats, profile, transactions."""
    import numpy as np
    import pandas as pd

    t0 = pd.Timestamp(start)
    stats = pd.concat(snapshots, ignore_index=True)
    stats.insert(1, "event_timestamp", t0 + pd.to_timedelta(stats.pop("day"), unit="D"))
    stats["created"] = stats["event_timestamp"] + pd.Timedelta(minutes=1)

    profile = pd.DataFrame(
        {
            "customer_id": ids,
            "event_timestamp": t0,
            "account_age_days": age,
            "country_risk": np.round(country_risk, 4),
        }
    )
    profile["created"] = profile["event_timestamp"]

    txns = pd.concat(txn_parts, ignore_index=True)
    txns.insert(1, "event_timestamp", t0 + pd.to_timedelta(txns.pop("offset_s"), unit="s"))
    txns = txns.sort_values(["event_timestamp", "customer_id"], kind="stable", ignore_index=True)
    return stats, profile, txns


def _snapshot(
    day: int, count: np.ndarray, total: np.ndarray, peak: np.ndarray, frauds: np.ndarray
) -> dict[str, np.ndarray]:
    """Activity statistics at the start of ``day``, from the days before it only."""
    import numpy as np

    week = slice(max(0, day - 7), day)
    quarter = slice(max(0, day - 90), day)
    n_week = count[week].sum(axis=0)
    n_quarter = count[quarter].sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_week = np.where(n_week > 0, total[week].sum(axis=0) / n_week, 0.0)
    return {
        "txn_count_1d": count[day - 1] if day > 0 else np.zeros(count.shape[1], dtype="int64"),
        "txn_count_7d": n_week,
        "amount_mean_7d": np.round(mean_week, 2),
        "amount_max_7d": peak[week].max(axis=0) if day > 0 else np.zeros(count.shape[1]),
        # A smoothed rate: a prior of 2 % weighted like five transactions.
        "chargeback_rate_90d": np.round((frauds[quarter].sum(axis=0) + 0.1) / (n_quarter + 5), 4),
    }


def _fraud_probability(
    owner: np.ndarray,
    amount: np.ndarray,
    snap: dict[str, np.ndarray],
    risk: np.ndarray,
    age: np.ndarray,
    country_risk: np.ndarray,
) -> np.ndarray:
    import numpy as np

    typical = np.where(snap["amount_mean_7d"] > 0, snap["amount_mean_7d"], 50.0)[owner]
    spike = snap["txn_count_1d"] > snap["txn_count_7d"] / 7.0 + 2
    logit = (
        -5.7
        + 1.6 * np.clip(np.log(amount / typical), -2.0, 3.0)
        + 12.0 * snap["chargeback_rate_90d"][owner]
        + 0.9 * spike[owner]
        + 2.0 * country_risk[owner]
        + 1.0 * (age[owner] < 90)
        + 0.5 * risk[owner]
    )
    probability: np.ndarray = 1.0 / (1.0 + np.exp(-logit))
    return probability
