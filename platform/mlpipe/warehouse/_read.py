"""Reads over the warehouse: ad-hoc SQL, and windows of predictions (sampled in SQL)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec
import sqlalchemy as sa

from mlpipe.errors import InvalidInput
from mlpipe.warehouse import _dialects, _engine, _schema

if TYPE_CHECKING:
    import pandas as pd

    from mlpipe.config import Settings


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool


_READ_STATEMENTS = ("select", "with", "values", "table", "explain", "show", "describe", "summarize")
_LEADING_COMMENTS = re.compile(r"\A(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*", re.DOTALL)


def query(
    settings: Settings, sql: str, limit: int | None = 1000, notify: _engine.Notify | None = None
) -> QueryResult:
    """Run one read-only SQL statement; at most ``limit`` rows come back (``truncated`` says so).

    Only a reading statement is taken (SELECT, WITH, VALUES, TABLE, EXPLAIN, SHOW,
    DESCRIBE, SUMMARIZE), and only one: on PostgreSQL it runs as a prepared
    statement (which the server refuses to hold two of) in a read-only
    transaction, its text passed as is (a ``%`` is not a parameter). DuckDB opens
    the file read-only with file-system access off. Raises :class:`InvalidInput`
    for empty, writing or failing SQL.
    """
    if not sql.strip():
        raise InvalidInput("empty SQL")
    _require_reading(sql)
    with _engine.read(settings, notify) as conn:
        columns, rows = _dialects.dialect_of(conn).run_query(conn, sql, limit)
    return _result(columns, rows, limit)


def _require_reading(sql: str) -> None:
    words = _LEADING_COMMENTS.sub("", sql, count=1).split(None, 1)
    if not words or words[0].lower().rstrip(";(") not in _READ_STATEMENTS:
        raise InvalidInput(
            "query failed: the warehouse is read-only here; run one SELECT, WITH, VALUES, "
            "TABLE, EXPLAIN, SHOW, DESCRIBE or SUMMARIZE statement"
        )


def _result(columns: list[str], rows: list[tuple[Any, ...]], limit: int | None) -> QueryResult:
    truncated = limit is not None and len(rows) > limit
    return QueryResult(columns, rows[:limit], truncated)


@dataclass
class PredictionWindow:
    """Predictions of one model in [start, end): base columns, and the logged features beside them.

    ``rows`` has request_id, ts, arm, version, generation, score, label (NaN
    where none: a regression; integers where every row has one), latency_ms,
    status, ``probabilities`` (a list of floats per multiclass row, None
    otherwise), ``outcome`` (NaN where no label has arrived, or the label is not
    a number) and ``outcome_label`` (the label as loaded, as text; None where
    none has arrived);
    ``features`` has one column per logged model input, on the same index.
    ``entities`` (only when asked for) has ``entity_key`` and one column per
    logged entity field, values as logged. ``total`` counts the window before
    sampling.
    """

    rows: pd.DataFrame
    features: pd.DataFrame
    total: int
    sampled: bool
    entities: pd.DataFrame | None = None


_PROBABILITIES = msgspec.json.Decoder(list[list[float]])
_BASE = [
    "request_id",
    "tenant",  # request ids are the clients': a request is a (tenant, request id)
    "ts",
    "arm",
    "version",
    "generation",
    "score",
    "label",
    "latency_ms",
    "status",
]


def prediction_window(
    settings: Settings,
    model: str,
    start: datetime,
    end: datetime,
    arm: str | None = None,
    sample_rows: int | None = None,
    seed: int = 42,
    notify: _engine.Notify | None = None,
    with_entities: bool = False,
) -> PredictionWindow:
    """Read a window of predictions (naive UTC times), sampled in SQL above ``sample_rows``.

    ``with_entities`` also returns each row's logged entity (train/serve skew joins on it).
    """
    import pandas as pd

    p, o = _schema.predictions, _schema.outcomes
    cond = [p.c.model == model, p.c.ts >= start, p.c.ts < end]
    if arm is not None:
        cond.append(p.c.arm == arm)
    extra = [p.c.entity_key, p.c.entity] if with_entities else []
    stmt = (
        sa.select(
            *(p.c[c] for c in _BASE),
            p.c.probabilities,
            p.c.features,
            o.c.outcome,
            o.c.outcome_label,
            *extra,
        )
        .select_from(
            p.outerjoin(o, sa.and_(o.c.request_id == p.c.request_id, o.c.tenant == p.c.tenant))
        )
        .where(*cond)
    )
    with _engine.read(settings, notify) as conn:
        total = conn.execute(sa.select(sa.func.count()).select_from(p).where(*cond)).scalar_one()
        sample = sample_rows if sample_rows is not None and total > sample_rows else None
        frame = _dialects.dialect_of(conn).fetch_frame(conn, stmt, sample, seed)
    entities = None
    if with_entities:
        frame, entities = _split_entities(frame)
    features = _decode_features(frame)
    frame = frame.drop(columns=["features"])
    frame["ts"] = pd.to_datetime(frame["ts"])
    frame["outcome"] = pd.to_numeric(frame["outcome"], errors="coerce")
    frame["label"] = _nullable_label(frame["label"])
    frame["probabilities"] = _decode_probabilities(frame["probabilities"])
    frame["outcome_label"] = (
        frame["outcome_label"].astype(object).where(frame["outcome_label"].notna(), None)
    )
    return PredictionWindow(frame, features, int(total), sample is not None, entities)


def _split_entities(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The frame without its entity columns, and the logged entities (``entity_key`` first)."""
    import msgspec
    import pandas as pd

    logged = [msgspec.json.decode(e.encode()) for e in frame["entity"]]
    entities = pd.DataFrame.from_records(logged, index=frame.index) if logged else None
    if entities is None:
        entities = pd.DataFrame(index=frame.index)
    entities.insert(0, "entity_key", frame["entity_key"])
    return frame.drop(columns=["entity_key", "entity"]), entities


def _decode_features(frame: pd.DataFrame) -> pd.DataFrame:
    """One column per logged model input (numbers where they all parse), on the frame's index."""
    import msgspec
    import pandas as pd

    decoded = (
        msgspec.json.decode(("[" + ",".join(frame["features"]) + "]").encode())
        if len(frame)
        else []
    )
    features = (
        pd.DataFrame.from_records(decoded, index=frame.index)
        if decoded
        else pd.DataFrame(index=frame.index)
    )
    return features.apply(_numbers_where_all_parse) if len(features.columns) else features


def _numbers_where_all_parse(column: pd.Series) -> pd.Series:
    """A logged input as numbers, or as it was logged (a model's string input) when any
    present value is no number: drift then compares its categories."""
    import pandas as pd

    numbers = pd.to_numeric(column, errors="coerce")
    return numbers if numbers.notna().sum() == column.notna().sum() else column


def _nullable_label(label: pd.Series) -> pd.Series:
    """Labels as integers where every row has one, else floats with NaN where there is none
    (DuckDB hands a column with NULLs over as pandas' ``Int32``, PostgreSQL as objects)."""
    import numpy as np
    import pandas as pd

    if label.isna().any():
        return pd.to_numeric(label, errors="coerce").astype("float64")
    if isinstance(label.dtype, np.dtype) and label.dtype.kind in "iu":
        return label
    return label.astype("int64")


def _decode_probabilities(column: pd.Series) -> pd.Series:
    """Each row's class probabilities as a list of floats, or None (not multiclass).

    The JSON texts of a window are decoded in one call, and only where there are any.
    """
    import numpy as np
    import pandas as pd

    rows: list[list[float] | None] = [None] * len(column)
    present = np.flatnonzero(column.notna().to_numpy())
    if present.size:
        text = "[" + ",".join(column.iloc[present].tolist()) + "]"
        for i, row in zip(present.tolist(), _PROBABILITIES.decode(text), strict=True):
            rows[i] = row
    return pd.Series(rows, index=column.index, dtype=object)


def models_in_warehouse(settings: Settings, notify: _engine.Notify | None = None) -> list[str]:
    with _engine.read(settings, notify) as conn:
        p = _schema.predictions
        return list(conn.execute(sa.select(p.c.model).distinct().order_by(p.c.model)).scalars())
