"""Dataset files: entity frames read with UTC timestamps, training sets written by suffix,
and the one-line refusals before a file is touched."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from mlpipe.errors import InvalidInput, NotFound
from mlpipe.features._datasets import read_entities, write_dataset

ENTITIES = pd.DataFrame(
    {
        "customer_id": [1, 2],
        "event_timestamp": ["2026-12-01T10:00:00+01:00", "2026-12-02T00:00:00+00:00"],
    }
)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_entities_are_read_with_their_timestamps_in_utc(tmp_path: Path, suffix: str) -> None:
    path = write_dataset(ENTITIES, tmp_path / f"entities{suffix}")
    frame = read_entities(str(path))
    assert frame["customer_id"].tolist() == [1, 2]
    assert str(frame["event_timestamp"].dt.tz) == "UTC"
    assert frame["event_timestamp"].tolist() == [
        pd.Timestamp("2026-12-01T09:00:00", tz="UTC"),
        pd.Timestamp("2026-12-02T00:00:00", tz="UTC"),
    ]


def test_a_missing_entities_file_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound) as raised:
        read_entities(tmp_path / "x.csv")
    assert str(raised.value) == f"entities file not found: {tmp_path / 'x.csv'}"


def test_entities_in_another_format_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "entities.json"
    path.write_text("{}")
    with pytest.raises(InvalidInput, match=r"entities must be a \.csv or \.parquet file$"):
        read_entities(path)


def test_an_unreadable_entities_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "entities.parquet"
    path.write_text("not parquet")
    with pytest.raises(InvalidInput, match="^" + re.escape(f"cannot read entities from {path}: ")):
        read_entities(path)


def test_entities_without_event_timestamp_name_the_columns_they_have(tmp_path: Path) -> None:
    frame = pd.DataFrame({"customer_id": [1], "ts": ["2026-12-01"]})
    path = write_dataset(frame, tmp_path / "e.csv")
    with pytest.raises(InvalidInput) as raised:
        read_entities(path)
    assert str(raised.value) == f"{path}: no 'event_timestamp' column (have customer_id, ts)"


def test_an_event_timestamp_that_is_no_timestamp_is_refused(tmp_path: Path) -> None:
    frame = pd.DataFrame({"customer_id": [1], "event_timestamp": ["yesterday-ish"]})
    path = write_dataset(frame, tmp_path / "e.csv")
    with pytest.raises(InvalidInput) as refused:
        read_entities(path)
    assert str(refused.value) == (
        f"{path}: event_timestamp is not a timestamp column: Time data yesterday-ish is not "
        "ISO8601 format, at position 0. (text timestamps are read as ISO 8601, e.g. "
        "2026-12-01T10:00:00Z)"
    )


def test_iso_timestamps_of_mixed_layouts_are_read_row_by_row(tmp_path: Path) -> None:
    stamps = ["2026-12-01T10:00:00+01:00", "2026-12-02", "2026-12-03 04:05:06Z"]
    path = write_dataset(pd.DataFrame({"customer_id": [1, 2, 3], "event_timestamp": stamps}),
                         tmp_path / "e.csv")  # fmt: skip
    read = read_entities(path)["event_timestamp"]
    assert list(read) == [
        pd.Timestamp("2026-12-01T09:00:00Z"),
        pd.Timestamp("2026-12-02T00:00:00Z"),
        pd.Timestamp("2026-12-03T04:05:06Z"),
    ]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_training_set_is_written_by_suffix_into_new_directories(
    tmp_path: Path, suffix: str
) -> None:
    frame = pd.DataFrame({"amount": [1.5, 2.5], "label": [0, 1]})
    path = write_dataset(frame, tmp_path / "out" / "deep" / f"train{suffix}")
    read = pd.read_csv(path) if suffix == ".csv" else pd.read_parquet(path)
    pd.testing.assert_frame_equal(read, frame)


def test_a_training_set_in_another_format_is_refused_and_nothing_is_made(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as raised:
        write_dataset(pd.DataFrame({"a": [1]}), tmp_path / "out" / "train.xlsx")
    assert str(raised.value) == (
        f"{tmp_path / 'out' / 'train.xlsx'}: the output must be a .csv or .parquet file"
    )
    assert not (tmp_path / "out").exists()
