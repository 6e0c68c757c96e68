"""``warehouse query`` on PostgreSQL: one read-only statement, nothing else (issue 23, item 7).

Before the fix, ``COMMIT; DROP TABLE outcomes`` exited 0 and dropped the table
(the COMMIT ended the read-only transaction), ``COPY ... TO`` a server file
worked as a superuser, and any ``%`` broke a query (it was read as a parameter).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlpipe.config import Settings
from mlpipe.errors import InvalidInput
from tests.integration.prod_services import postgres_database

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    from mlpipe import warehouse
    from mlpipe.predlog import ENCODER, PredictionRecord

    home = tmp_path_factory.mktemp("pg-query")
    with postgres_database() as url:
        settings = Settings(home=home, warehouse_url=url)
        segment = settings.predlog_path / "w1" / "seg-1.jsonl"
        segment.parent.mkdir(parents=True)
        now = time.time() - 60
        records = [
            PredictionRecord(
                request_id=f"r{i}",
                ts=now + i,
                tenant="default",
                model="fraud",
                version="1",
                arm="canary" if i % 4 == 0 else "champion",
                generation=1,
                entity_key=f"customer_id={i}",
                entity={"customer_id": i},
                features={"amount": float(i)},
                score=0.25,
                label=0,
                latency_ms=2.0,
            )
            for i in range(20)
        ]
        segment.write_bytes(b"".join(ENCODER.encode(r) + b"\n" for r in records))
        assert warehouse.sync(settings).rows_loaded == 20
        yield settings


def _count(settings: Settings, table: str) -> int:
    from mlpipe import warehouse

    return int(warehouse.query(settings, f"SELECT count(*) FROM {table}").rows[0][0])


def test_a_percent_sign_is_plain_sql(settings: Settings) -> None:
    from mlpipe import warehouse

    result = warehouse.query(settings, "SELECT count(*) FROM predictions WHERE arm LIKE 'can%'")
    assert result.rows == [(5,)]


def test_a_second_statement_is_refused_and_changes_nothing(settings: Settings) -> None:
    from mlpipe import warehouse

    with pytest.raises(InvalidInput, match="one statement"):
        warehouse.query(settings, "SELECT 1; DROP TABLE outcomes")
    assert _count(settings, "outcomes") == 0  # the table is still there


@pytest.mark.parametrize(
    "sql",
    [
        "COMMIT; DROP TABLE outcomes",
        "DELETE FROM predictions",
        "DROP TABLE outcomes",
        "CREATE TABLE evil (x int)",
        "  -- a comment first\n  UPDATE predictions SET score = 1",
    ],
)
def test_a_write_is_refused_and_changes_nothing(settings: Settings, sql: str) -> None:
    from mlpipe import warehouse

    with pytest.raises(InvalidInput, match="read-only"):
        warehouse.query(settings, sql)
    assert _count(settings, "predictions") == 20
    assert _count(settings, "outcomes") == 0


def test_copy_to_a_server_file_is_refused(settings: Settings, tmp_path: Path) -> None:
    from mlpipe import warehouse

    target = tmp_path / "leak.csv"
    with pytest.raises(InvalidInput, match="read-only"):
        warehouse.query(settings, f"COPY predictions TO '{target}'")
    assert not target.exists()
