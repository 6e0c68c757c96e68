"""Loading ground-truth labels (``outcomes``) and matching them to the predictions they label.

A file names each outcome by ``request_id``, or by ``entity_key`` + ``timestamp``
(the time of the event the label is about). The second form matches the latest
non-shadow prediction for that entity at or before the timestamp (plus a small
tolerance): labels arrive late, so matching never looks at when the file is
loaded. Every row must match, or nothing is loaded.

Request ids and entity keys are the clients', so two tenants may log the same
one: an outcome belongs to a (tenant, request id). The tenant comes from a
``tenant`` column or from ``tenant=`` (``--tenant``) for the whole file; without
either, an outcome takes the tenant of the prediction it matches, and an id or
entity key that more than one tenant logged is refused rather than attached to
one of them at random.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from mlpipe.errors import InvalidInput, NotFound
from mlpipe.warehouse import _dialects, _engine, _mirror, _schema
from mlpipe.warehouse._sync import sync

if TYPE_CHECKING:
    import pandas as pd

    from mlpipe.config import Settings

ACCEPTED_COLUMNS = ("request_id", "entity_key", "timestamp", "label", "tenant")
DEFAULT_MATCH_TOLERANCE_S = 60.0
# The columns of a matched file, as ``outcomes`` stores them.
_MATCHED = ["request_id", "tenant", "outcome", "outcome_label", "outcome_ts"]
# (model, version) -> the version's class labels; None or () where it is no classifier
# (or not known): then its outcomes are not checked against classes.
ClassesOf = Callable[[str, str], Sequence[object] | None]


@dataclass(frozen=True)
class OutcomesResult:
    """What one load did: rows in the file, how they were matched, how many were new,
    replaced (labelled before, now otherwise) or unchanged (the same label again), and
    how many labels name no class of the classifier that scored them (loaded all the
    same; ``unknown_label_example`` is the first, as ``'x' (iris v2: a, b, c)``)."""

    path: str
    rows: int
    matched_by: str  # "request_id" or "entity_key+timestamp"
    inserted: int
    replaced: int
    unchanged: int = 0
    unknown_labels: int = 0
    unknown_label_example: str | None = None


def _read_frame(path: Path) -> pd.DataFrame:
    import pandas as pd

    if not path.exists():
        raise NotFound(f"outcomes file {path} does not exist")
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            # labels as text, exactly as written ("2.50", "007", "setosa"): see _labels
            text = {"request_id": str, "entity_key": str, "tenant": str, "label": str}
            return pd.read_csv(path, dtype=text)
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
    except (ValueError, OSError) as exc:
        raise InvalidInput(f"cannot read {path}: {exc}") from exc
    raise InvalidInput(f"{path}: outcomes must be .csv or .parquet, not {suffix or 'no suffix'}")


def _with_tenant(frame: pd.DataFrame, path: Path, tenant: str | None) -> pd.DataFrame:
    """The frame with its ``tenant`` column checked, or ``tenant`` as one (if given)."""
    if "tenant" not in frame.columns:
        if tenant is None:
            return frame
        if not tenant.strip():
            raise InvalidInput("the tenant given is empty")
        return frame.assign(tenant=tenant)
    if tenant is not None:
        raise InvalidInput(
            f"{path}: has a 'tenant' column and --tenant was given; name the tenant one way"
        )
    empty = frame["tenant"].isna() | (frame["tenant"].astype(str).str.strip() == "")
    if empty.any():
        first = int(empty.to_numpy().nonzero()[0][0])
        raise InvalidInput(f"{path}: tenant on data row {first + 1} is empty")
    return frame.assign(tenant=frame["tenant"].astype(str))


def _validate(frame: pd.DataFrame, path: Path, tenant: str | None) -> tuple[pd.DataFrame, str]:
    import pandas as pd

    unknown = [c for c in frame.columns if c not in ACCEPTED_COLUMNS]
    if unknown:
        raise InvalidInput(
            f"{path}: unknown column(s) {', '.join(map(str, unknown))}; accepted: "
            f"request_id, label  or  entity_key, timestamp, label (and tenant)"
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
    frame = _labels(frame, path)
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
    return _with_tenant(frame, path, tenant), by


def _labels(frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    """The frame with ``label`` replaced by ``outcome`` (its number, NaN where it is not
    one) and ``outcome_label`` (its text as the file gave it).

    A label is a class (``1``, ``"setosa"``) or a target (``2.5``): any value but
    an empty or missing one, or a number that is not finite.
    """
    import numpy as np
    import pandas as pd

    raw = frame["label"]
    text = raw.astype(str).where(raw.notna(), "")
    empty = (text.str.strip() == "").to_numpy()
    numbers = pd.to_numeric(raw.where(~empty), errors="coerce").astype(float)
    bad = empty | np.isinf(numbers.to_numpy())
    if bad.any():
        first = int(bad.nonzero()[0][0])
        why = "missing" if empty[first] else f"{raw.iloc[first]!r}, not a finite number"
        raise InvalidInput(f"{path}: label on data row {first + 1} is {why}")
    return frame.drop(columns="label").assign(outcome=numbers, outcome_label=text)


def _tenants_of(conn: sa.Connection, ids: list[str]) -> dict[str, set[str]]:
    """For each request id the warehouse holds, the tenants that logged it."""
    p = _schema.predictions
    found: dict[str, set[str]] = {}
    for start in range(0, len(ids), 5000):
        query = (
            sa.select(p.c.request_id, p.c.tenant)
            .distinct()
            .where(p.c.request_id.in_(ids[start : start + 5000]))
        )
        for request_id, tenant in conn.execute(query):
            found.setdefault(request_id, set()).add(tenant)
    return found


def _ambiguous(path: Path, what: str, first: str, tenants: set[str], n: int) -> InvalidInput:
    return InvalidInput(
        f"{path}: {n} {what}(s) logged by more than one tenant (first: {first}, by "
        f"{', '.join(sorted(tenants))}); name the tenant with --tenant or a 'tenant' column"
    )


def _match_ids(conn: sa.Connection, frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Each row's tenant: the one it names, or the only tenant that logged its id."""
    import pandas as pd

    ids = frame["request_id"].drop_duplicates().tolist()
    found = _tenants_of(conn, ids)
    if "tenant" in frame.columns:
        pairs = zip(frame["request_id"], frame["tenant"], strict=True)
        known = [t in found.get(i, ()) for i, t in pairs]
        unknown = frame[[not k for k in known]]
        if not unknown.empty:
            first = unknown.iloc[0]
            raise InvalidInput(
                f"{len(unknown)} request id(s) not logged by tenant {first['tenant']} "
                f"(first: {first['request_id']}); run `mlpipe warehouse sync` first, "
                "or check the file"
            )
    else:
        missing = [i for i in ids if i not in found]
        if missing:
            raise InvalidInput(
                f"{len(missing)} request id(s) not in the warehouse "
                f"(first: {', '.join(missing[:3])}); "
                "run `mlpipe warehouse sync` first, or check the file"
            )
        shared = [i for i in ids if len(found[i]) > 1]
        if shared:
            raise _ambiguous(path, "request id", shared[0], found[shared[0]], len(shared))
        frame = frame.assign(tenant=[next(iter(found[i])) for i in frame["request_id"]])
    return frame.assign(outcome_ts=pd.NaT)[_MATCHED]


def _logged_entities(conn: sa.Connection, frame: pd.DataFrame) -> pd.DataFrame:
    """The non-shadow predictions of the file's entity keys (of its tenants, if it names them)."""
    import pandas as pd

    p = _schema.predictions
    cond = [p.c.arm != "shadow"]
    if "tenant" in frame.columns:
        cond.append(p.c.tenant.in_(frame["tenant"].drop_duplicates().tolist()))
    keys = frame["entity_key"].drop_duplicates().tolist()
    columns = ["request_id", "tenant", "entity_key", "ts"]
    rows: list[sa.Row[Any]] = []
    for start in range(0, len(keys), 5000):
        chunk = keys[start : start + 5000]
        query = sa.select(*(p.c[c] for c in columns)).where(p.c.entity_key.in_(chunk), *cond)
        rows.extend(conn.execute(query).all())
    preds = pd.DataFrame(rows, columns=columns)
    preds["ts"] = pd.to_datetime(preds["ts"])
    return preds


def _match_entities(
    conn: sa.Connection, frame: pd.DataFrame, path: Path, tolerance_s: float
) -> pd.DataFrame:
    """Each row's request: the latest prediction for its entity (of its tenant) at or before it."""
    import pandas as pd

    preds = _logged_entities(conn, frame)
    scoped = "tenant" in frame.columns
    if not scoped:
        tenants = preds.groupby("entity_key")["tenant"].agg(set)
        shared = [k for k in frame["entity_key"].drop_duplicates() if len(tenants.get(k, ())) > 1]
        if shared:
            raise _ambiguous(path, "entity key", shared[0], tenants[shared[0]], len(shared))
    left = frame.reset_index(drop=True).assign(_row=lambda f: f.index).sort_values("timestamp")
    merged = pd.merge_asof(
        left,
        preds.sort_values("ts"),
        left_on="timestamp",
        right_on="ts",
        by=["tenant", "entity_key"] if scoped else "entity_key",
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
    return merged.rename(columns={"timestamp": "outcome_ts"})[_MATCHED]


def load_outcomes(
    settings: Settings,
    path: Path | str,
    notify: _engine.Notify | None = None,
    tolerance_s: float = DEFAULT_MATCH_TOLERANCE_S,
    tenant: str | None = None,
    *,
    sync_first: bool = False,
    history: _mirror.HistorySource | None = None,
    classes: ClassesOf | None = None,
) -> OutcomesResult:
    """Load labels (CSV or Parquet) into ``outcomes``; loading a file twice changes nothing.

    With ``sync_first`` the prediction log is synced into the warehouse first (as
    the reports do; ``history`` as for :func:`mlpipe.warehouse.sync`), so labels
    of requests just served match. ``tenant`` names the tenant of every row (the
    file then has no ``tenant`` column). A label may be a class (``1``,
    ``setosa``) or a target (``2.5``): ``outcome`` keeps its number (NULL where it
    is not one), ``outcome_label`` its text. With ``classes``, a label naming no
    class of any classifier version that scored its request is counted in the
    result (and loaded). A request labelled again with the same label and
    timestamp is unchanged, not replaced. Raises :class:`NotFound` for a missing
    file and :class:`InvalidInput` for an unreadable file, unknown or missing
    columns, an empty label or one that is an infinite number, an empty tenant,
    rows that match no logged prediction (of their tenant), or, without a tenant,
    an id or entity key that more than one tenant logged; in every error case
    nothing is written.
    """
    path = Path(path)
    frame, by = _validate(_read_frame(path), path, tenant)
    if sync_first:
        sync(settings, notify, history=history)
    with _engine.write(settings, notify) as conn:
        if by == "request_id":
            matched = _match_ids(conn, frame, path)
        else:
            matched = _match_entities(conn, frame, path, tolerance_s)
        # A request labelled twice in one file keeps its last label.
        matched = matched.drop_duplicates(["request_id", "tenant"], keep="last")
        unknown, example = _unknown_labels(conn, matched, classes) if classes else (0, None)
        changed = _changed(conn, matched)
        replaced = _delete_labelled(conn, changed)
        rows = _insert(conn, changed, path.name) if len(changed) else 0
    unchanged = len(matched) - len(changed)
    return OutcomesResult(
        str(path), len(frame), by, rows - replaced, replaced, unchanged, unknown, example
    )


def _labelled(conn: sa.Connection, matched: pd.DataFrame, *columns: str) -> list[tuple[Any, ...]]:
    """``columns`` of the outcomes (or, ``model``/``version``, the predictions) already
    stored for the matched (tenant, request id) pairs."""
    table = _schema.predictions if "model" in columns else _schema.outcomes
    found: list[tuple[Any, ...]] = []
    for tenant, ids in matched.groupby("tenant")["request_id"]:
        ids_ = ids.tolist()
        for start in range(0, len(ids_), 5000):
            chunk = ids_[start : start + 5000]
            query = sa.select(*(table.c[c] for c in ("request_id", *columns))).where(
                table.c.tenant == tenant, table.c.request_id.in_(chunk)
            )
            found.extend((tenant, *row) for row in conn.execute(query))
    return found


def _changed(conn: sa.Connection, matched: pd.DataFrame) -> pd.DataFrame:
    """The matched rows whose stored outcome differs (or is absent): the others stay as
    they are, so loading the same file again writes nothing."""
    import pandas as pd

    stored = {
        (tenant, rid): (label, None if ts is None or pd.isna(ts) else pd.Timestamp(ts))
        for tenant, rid, label, ts in _labelled(conn, matched, "outcome_label", "outcome_ts")
    }
    if not stored:
        return matched
    same = [
        stored.get((t, r)) == (label, None if pd.isna(ts) else pd.Timestamp(ts))
        for t, r, label, ts in zip(
            matched["tenant"],
            matched["request_id"],
            matched["outcome_label"],
            matched["outcome_ts"],
            strict=True,
        )
    ]
    return matched[[not s for s in same]]


def _names_class(label: str, classes: Sequence[object]) -> bool:
    """Whether ``label`` (as the file gave it) names one of ``classes`` (``1`` and
    ``1.0`` name the class 1)."""
    if any(label == str(c) for c in classes):
        return True
    try:
        number = float(label)
    except ValueError:
        return False
    return any(
        isinstance(c, int | float) and not isinstance(c, bool) and float(c) == number
        for c in classes
    )


def _unknown_labels(
    conn: sa.Connection, matched: pd.DataFrame, classes_of: ClassesOf
) -> tuple[int, str | None]:
    """How many labels name no class of any classifier version that scored their request,
    and the first of them described."""
    scored: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for tenant, rid, model, version in _labelled(conn, matched, "model", "version"):
        scored.setdefault((tenant, rid), set()).add((model, version))
    known: dict[tuple[str, str], tuple[object, ...]] = {}
    count, example = 0, None
    pairs = zip(matched["tenant"], matched["request_id"], matched["outcome_label"], strict=True)
    for tenant, rid, label in pairs:
        versions = sorted(scored.get((tenant, rid), ()))
        for mv in versions:
            if mv not in known:
                known[mv] = tuple(classes_of(*mv) or ())
        classifiers = [mv for mv in versions if known[mv]]
        if classifiers and not any(_names_class(label, known[mv]) for mv in classifiers):
            count += 1
            if example is None:
                model, version = classifiers[0]
                names = ", ".join(str(c) for c in known[classifiers[0]])
                example = f"{label!r} ({model} v{version}: {names})"
    return count, example


def _delete_labelled(conn: sa.Connection, matched: pd.DataFrame) -> int:
    """Delete the outcomes the file labels again; returns how many there were."""
    o = _schema.outcomes
    replaced = 0
    for tenant, ids in matched.groupby("tenant")["request_id"]:
        ids_ = ids.tolist()
        for start in range(0, len(ids_), 5000):
            chunk = ids_[start : start + 5000]
            gone = conn.execute(o.delete().where(o.c.tenant == tenant, o.c.request_id.in_(chunk)))
            replaced += gone.rowcount or 0
    return replaced


def _insert(conn: sa.Connection, matched: pd.DataFrame, source: str) -> int:
    import pandas as pd

    rows = pd.DataFrame(
        {
            "request_id": matched["request_id"].astype(str),
            "tenant": matched["tenant"].astype(str),
            "outcome": matched["outcome"].astype(float),  # NaN: NULL
            "outcome_label": matched["outcome_label"].astype(str),
            "outcome_ts": pd.to_datetime(matched["outcome_ts"]),
            "source": source,
            "loaded_at": datetime.now(UTC).replace(tzinfo=None),
        }
    )
    _dialects.dialect_of(conn).insert_outcomes(conn, rows)
    return len(rows)
