"""Loading ground-truth labels (``outcomes``) and matching them to the predictions they label.

A file names each outcome by ``request_id``, or by ``entity_key`` + ``timestamp``
(the time of the event the label is about). The second form matches the latest
non-shadow prediction for that entity at or before the timestamp (plus a small
tolerance): labels arrive late, so matching never looks at when the file is
loaded. Every row must match, or nothing is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from mlpipe.errors import InvalidInput, NotFound
from mlpipe.warehouse import _engine, _schema

if TYPE_CHECKING:
    import pandas as pd

    from mlpipe.config import Settings

ACCEPTED_COLUMNS = ("request_id", "entity_key", "timestamp", "label")
DEFAULT_MATCH_TOLERANCE_S = 60.0


@dataclass(frozen=True)
class OutcomesResult:
    """What one load did: rows in the file, how they were matched, how many were new."""

    path: str
    rows: int
    matched_by: str  # "request_id" or "entity_key+timestamp"
    inserted: int
    replaced: int


def _read_frame(path: Path) -> pd.DataFrame:
    import pandas as pd

    if not path.exists():
        raise NotFound(f"outcomes file {path} does not exist")
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            return pd.read_csv(path, dtype={"request_id": str, "entity_key": str})
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
    except (ValueError, OSError) as exc:
        raise InvalidInput(f"cannot read {path}: {exc}") from exc
    raise InvalidInput(f"{path}: outcomes must be .csv or .parquet, not {suffix or 'no suffix'}")


def _validate(frame: pd.DataFrame, path: Path) -> tuple[pd.DataFrame, str]:
    import pandas as pd

    unknown = [c for c in frame.columns if c not in ACCEPTED_COLUMNS]
    if unknown:
        raise InvalidInput(
            f"{path}: unknown column(s) {', '.join(map(str, unknown))}; accepted: "
            f"request_id, label  or  entity_key, timestamp, label"
        )
    if "label" not in frame.columns:
        raise InvalidInput(f"{path}: no 'label' column")
    if "request_id" in frame.columns:
        by = "request_id"
    elif {"entity_key", "timestamp"} <= set(frame.columns):
        by = "entity_key+timestamp"
    else:
        raise InvalidInput(f"{path}: needs a 'request_id' column, or 'entity_key' and 'timestamp'")
    if frame.empty:
        raise InvalidInput(f"{path}: no rows")
    labels = pd.to_numeric(frame["label"], errors="coerce")
    bad = labels.isna() | ~labels.abs().lt(float("inf"))
    if bad.any():
        first = int(bad.to_numpy().nonzero()[0][0])
        raise InvalidInput(
            f"{path}: label on data row {first + 1} is {frame['label'].iloc[first]!r}, not a number"
        )
    frame = frame.assign(label=labels.astype(float))
    if by == "entity_key+timestamp":
        ts = pd.to_datetime(frame["timestamp"], utc=True, errors="coerce")
        if ts.isna().any():
            first = int(ts.isna().to_numpy().nonzero()[0][0])
            raise InvalidInput(
                f"{path}: timestamp on data row {first + 1} "
                f"({frame['timestamp'].iloc[first]!r}) is not a date-time"
            )
        frame = frame.assign(
            timestamp=ts.dt.tz_localize(None), entity_key=frame["entity_key"].astype(str)
        )
    else:
        frame = frame.assign(request_id=frame["request_id"].astype(str))
    return frame, by


def _match(conn: sa.Connection, frame: pd.DataFrame, by: str, tolerance_s: float) -> pd.DataFrame:
    import pandas as pd

    p = _schema.predictions
    if by == "request_id":
        ids = frame["request_id"].drop_duplicates().tolist()
        known: set[str] = set()
        for start in range(0, len(ids), 5000):
            chunk = ids[start : start + 5000]
            known.update(
                conn.execute(sa.select(p.c.request_id).where(p.c.request_id.in_(chunk))).scalars()
            )
        missing = [i for i in ids if i not in known]
        if missing:
            raise InvalidInput(
                f"{len(missing)} request id(s) not in the warehouse "
                f"(first: {', '.join(missing[:3])}); "
                "run `mlpipe warehouse sync` first, or check the file"
            )
        return frame.assign(outcome_ts=pd.NaT)[["request_id", "label", "outcome_ts"]]
    keys = frame["entity_key"].drop_duplicates().tolist()
    parts = []
    for start in range(0, len(keys), 5000):
        chunk = keys[start : start + 5000]
        rows = conn.execute(
            sa.select(p.c.request_id, p.c.entity_key, p.c.ts).where(
                p.c.entity_key.in_(chunk), p.c.arm != "shadow"
            )
        ).all()
        parts.append(pd.DataFrame(rows, columns=["request_id", "entity_key", "ts"]))
    preds = pd.concat(parts) if parts else pd.DataFrame(columns=["request_id", "entity_key", "ts"])
    preds["ts"] = pd.to_datetime(preds["ts"])
    left = frame.reset_index(drop=True).assign(_row=lambda f: f.index).sort_values("timestamp")
    merged = pd.merge_asof(
        left,
        preds.sort_values("ts"),
        left_on="timestamp",
        right_on="ts",
        by="entity_key",
        direction="backward",
        tolerance=pd.Timedelta(days=36500),
    )
    late_ok = merged["ts"] <= merged["timestamp"] + pd.Timedelta(seconds=tolerance_s)
    unmatched = merged[merged["request_id"].isna() | ~late_ok]
    if not unmatched.empty:
        first = unmatched.sort_values("_row").iloc[0]
        raise InvalidInput(
            f"{len(unmatched)} outcome(s) match no prediction "
            f"(first: entity_key={first['entity_key']} "
            f"at {first['timestamp']}); run `mlpipe warehouse sync` first, or check the file"
        )
    merged = merged.rename(columns={"timestamp": "outcome_ts"})
    return merged[["request_id", "label", "outcome_ts"]]


def load_outcomes(
    settings: Settings,
    path: Path | str,
    notify: _engine.Notify | None = None,
    tolerance_s: float = DEFAULT_MATCH_TOLERANCE_S,
) -> OutcomesResult:
    """Load labels (CSV or Parquet) into ``outcomes``; loading a file twice changes nothing.

    Raises :class:`NotFound` for a missing file and :class:`InvalidInput` for an
    unreadable file, unknown or missing columns, a non-numeric label, or rows
    that match no logged prediction; in every error case nothing is written.
    """
    import pandas as pd

    path = Path(path)
    frame, by = _validate(_read_frame(path), path)
    with _engine.write(settings, notify) as conn:
        matched = _match(conn, frame, by, tolerance_s)
        # A request labelled twice in one file keeps its last label.
        matched = matched.drop_duplicates("request_id", keep="last")
        o = _schema.outcomes
        ids = matched["request_id"].tolist()
        replaced = 0
        for start in range(0, len(ids), 5000):
            chunk = ids[start : start + 5000]
            replaced += conn.execute(o.delete().where(o.c.request_id.in_(chunk))).rowcount or 0
        now = datetime.now(UTC).replace(tzinfo=None)
        rows = pd.DataFrame(
            {
                "request_id": matched["request_id"].astype(str),
                "outcome": matched["label"].astype(float),
                "outcome_ts": pd.to_datetime(matched["outcome_ts"]),
                "source": path.name,
                "loaded_at": now,
            }
        )
        if _engine.is_duckdb(settings.warehouse):
            raw = _engine.duckdb_connection(conn)
            raw.register("_mlpipe_outcomes", rows)
            try:
                raw.execute(
                    "INSERT INTO outcomes (request_id, outcome, outcome_ts, source, loaded_at) "
                    "SELECT request_id, outcome, outcome_ts, source, loaded_at "
                    "FROM _mlpipe_outcomes"
                )
            finally:
                raw.unregister("_mlpipe_outcomes")
        else:
            records = rows.astype(object).where(rows.notna(), None).to_dict("records")
            conn.execute(o.insert(), records)
    return OutcomesResult(str(path), len(frame), by, len(rows) - replaced, replaced)
