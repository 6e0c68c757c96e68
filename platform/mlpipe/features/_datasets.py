"""Dataset files: entity frames read in, training sets written out (``.csv`` or ``.parquet``).

The suffix picks the format; anything else is refused with :class:`InvalidInput`
before a file is touched. pandas is imported inside the functions, so importing
this module is cheap.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mlpipe.errors import InvalidInput, MlpipeError, NotFound

if TYPE_CHECKING:
    import pandas as pd

EVENT_TIMESTAMP = "event_timestamp"


def read_entities(path: Path | str) -> pd.DataFrame:
    """Read an entity frame (``.csv`` or ``.parquet``) and parse ``event_timestamp`` as UTC.

    Raises :class:`NotFound` naming a missing file and :class:`InvalidInput` for an
    unknown suffix, an unreadable file or a frame without ``event_timestamp``.
    """
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise NotFound(f"entities file not found: {path}")
    try:
        if path.suffix == ".parquet":
            frame = pd.read_parquet(path)
        elif path.suffix == ".csv":
            frame = pd.read_csv(path)
        else:
            raise InvalidInput(f"{path}: entities must be a .csv or .parquet file")
    except MlpipeError:
        raise
    except Exception as exc:
        raise InvalidInput(f"cannot read entities from {path}: {exc}") from exc
    if EVENT_TIMESTAMP not in frame:
        raise InvalidInput(f"{path}: no {EVENT_TIMESTAMP!r} column (have {', '.join(frame)})")
    column = frame[EVENT_TIMESTAMP]
    # Text is read as ISO 8601 row by row: pandas otherwise takes the first row's layout
    # for all, and refuses "2026-12-02" after "2026-12-01T10:00:00+01:00".
    text = pd.api.types.is_object_dtype(column) or pd.api.types.is_string_dtype(column)
    try:
        frame[EVENT_TIMESTAMP] = pd.to_datetime(
            column, utc=True, format="ISO8601" if text else None
        )
    except (ValueError, TypeError) as exc:
        # not pandas' advice on its own arguments
        reason = str(exc).splitlines()[0].removesuffix(" You might want to try:")
        raise InvalidInput(
            f"{path}: {EVENT_TIMESTAMP} is not a timestamp column: {reason} "
            "(text timestamps are read as ISO 8601, e.g. 2026-12-01T10:00:00Z)"
        ) from exc
    return frame


def write_dataset(frame: pd.DataFrame, path: Path | str) -> Path:
    """Write a training set as ``.csv`` or ``.parquet`` (by suffix); else :class:`InvalidInput`."""
    path = Path(path)
    if path.suffix not in (".csv", ".parquet"):
        raise InvalidInput(f"{path}: the output must be a .csv or .parquet file")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)
    return path
