"""Which columns can be tested for drift, in what form, and why the others cannot.

Evidently is robust but not to everything: a column with no values, a column
that is one value on both sides, a type that differs between reference and
current, ±inf. Those are settled here, before Evidently sees the data, so the
report covers the rest and the summary says what was left out and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, kw_only=True, slots=True)
class SkippedColumn:
    column: str
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Screened:
    """Both sides of the testable columns, which are numerical or categorical, and the rest."""

    reference: pd.DataFrame
    current: pd.DataFrame
    numerical: list[str] = field(default_factory=list)
    categorical: list[str] = field(default_factory=list)
    skipped: list[SkippedColumn] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def missing_columns(reference: pd.DataFrame, current: pd.DataFrame) -> list[str]:
    """The columns of both frames with a missing value (null, NaN) on either side: those whose
    missing share can move (a column complete on both sides cannot)."""
    shared = sorted(set(reference.columns) & set(current.columns))
    return [c for c in shared if reference[c].isna().any() or current[c].isna().any()]


def _kind(series: pd.Series) -> str:
    import pandas as pd

    if pd.api.types.is_bool_dtype(series):
        return "categorical"
    if pd.api.types.is_numeric_dtype(series):
        return "numerical"
    return "categorical"


def _as_numbers(series: pd.Series) -> pd.Series | None:
    """The series as numbers when every present value is one, else None."""
    import pandas as pd

    converted = pd.to_numeric(series, errors="coerce")
    return converted if converted.notna().sum() == series.notna().sum() else None


def screen(
    reference: pd.DataFrame, current: pd.DataFrame, columns: list[str], min_values: int
) -> Screened:
    """Decide, per column, numerical / categorical / skipped (with the reason)."""
    import pandas as pd

    ref_out: dict[str, pd.Series] = {}
    cur_out: dict[str, pd.Series] = {}
    numerical: list[str] = []
    categorical: list[str] = []
    skipped: list[SkippedColumn] = []
    notes: list[str] = []
    for col in columns:
        outcome = _screen_column(col, reference, current, min_values, notes)
        if isinstance(outcome, str):
            skipped.append(SkippedColumn(column=col, reason=outcome))
            continue
        kind, ref, cur = outcome
        ref_out[col], cur_out[col] = ref.reset_index(drop=True), cur.reset_index(drop=True)
        (numerical if kind == "numerical" else categorical).append(col)
    return Screened(
        reference=pd.DataFrame(ref_out, index=range(len(reference))),
        current=pd.DataFrame(cur_out, index=range(len(current))),
        numerical=numerical,
        categorical=categorical,
        skipped=skipped,
        notes=notes,
    )


def _screen_column(
    col: str, reference: pd.DataFrame, current: pd.DataFrame, min_values: int, notes: list[str]
) -> str | tuple[str, pd.Series, pd.Series]:
    """The column's kind and both sides ready to test, or why it cannot be tested."""
    if col not in reference.columns:
        return "not in the reference"
    if col not in current.columns:
        return "not in the logged requests"
    pair = _same_type(col, reference[col], current[col], notes)
    if isinstance(pair, str):
        return pair
    kind, ref, cur = _normalised(col, *pair, notes)
    why = _untestable(ref, cur, min_values)
    return why if why is not None else (kind, ref, cur)


def _same_type(
    col: str, ref: pd.Series, cur: pd.Series, notes: list[str]
) -> str | tuple[pd.Series, pd.Series]:
    """Both sides of one type: text read as numbers where the other side is numbers."""
    kinds = (_kind(ref), _kind(cur))
    if kinds[0] == kinds[1] or not (ref.notna().any() and cur.notna().any()):
        return ref, cur
    fixed_ref = _as_numbers(ref) if kinds[0] == "categorical" else ref
    fixed_cur = _as_numbers(cur) if kinds[1] == "categorical" else cur
    if fixed_ref is None or fixed_cur is None:
        return (
            f"type differs: {kinds[0]} ({ref.dtype}) in the reference, "
            f"{kinds[1]} ({cur.dtype}) in the logged requests"
        )
    notes.append(f"{col}: text values read as numbers to match the other side")
    return fixed_ref, fixed_cur


def _normalised(
    col: str, ref: pd.Series, cur: pd.Series, notes: list[str]
) -> tuple[str, pd.Series, pd.Series]:
    """Numbers as floats with ±inf as missing, or categories as text; and which it is."""
    import numpy as np
    import pandas as pd

    kind = "numerical" if (_kind(ref) == "numerical" or ref.isna().all()) else "categorical"
    if kind == "numerical" and not pd.api.types.is_numeric_dtype(cur):
        converted = _as_numbers(cur)
        kind = "numerical" if converted is not None else "categorical"
        cur = converted if converted is not None else cur
    if kind == "numerical":
        ref = pd.to_numeric(ref, errors="coerce").astype(float)
        cur = pd.to_numeric(cur, errors="coerce").astype(float)
        infinite = int(np.isinf(ref).sum() + np.isinf(cur).sum())
        if infinite:
            notes.append(f"{col}: {infinite} ±inf value(s) treated as missing")
            ref = ref.replace([np.inf, -np.inf], np.nan)
            cur = cur.replace([np.inf, -np.inf], np.nan)
    else:
        ref = ref.where(ref.isna(), ref.astype(str))
        cur = cur.where(cur.isna(), cur.astype(str))
    return kind, ref, cur


def _untestable(ref: pd.Series, cur: pd.Series, min_values: int) -> str | None:
    """Why a drift test of the two sides would say nothing, or None."""
    import pandas as pd

    n_ref, n_cur = int(ref.notna().sum()), int(cur.notna().sum())
    if n_ref == 0:
        return "no values in the reference (empty or all NaN)"
    if n_cur == 0:
        return "no values in the window (empty or all NaN)"
    if n_cur < min_values:
        return f"only {n_cur} value(s) in the window (< {min_values})"
    together = pd.concat([ref.dropna(), cur.dropna()])
    if together.nunique() == 1:
        return f"one value ({together.iloc[0]!r}) on both sides: nothing to test"
    return None
