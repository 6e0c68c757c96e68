"""``python -m bench.pg_retention``: a PostgreSQL warehouse's sync and prune, and its size.

Into a fresh database on the server at ``MLPIPE_TEST_PG`` (default
``postgresql://postgres@127.0.0.1:5432/test``): ``--rows`` logged rows spread
evenly over ``--days`` days in one closed segment, one ``warehouse sync``
(timed), ``VACUUM ANALYZE``, the database's size, then ``warehouse prune`` with
a retention of half the days (timed), the size again, a plain ``VACUUM`` and the
size once more; then the same rows again in a second segment (timed: half of
them are still loaded, a replay; the pruned half loads anew). Prints one line
per run (``--runs``, each in a database of its own, dropped afterwards);
asserts nothing. Compare two trees with
``PYTHONPATH=/tmp/mlpipe-before/platform`` (docs/decisions/index.md), run in
turns on the same machine: the figures in docs/decisions/035-pg-day-partitions.md
came so from the 2-core development machine.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path

ADMIN_URL = os.environ.get("MLPIPE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def _segment(path: Path, rows: int, days: int, now: float) -> None:
    from mlpipe.predlog import ENCODER, PredictionRecord

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        for i in range(rows):
            record = PredictionRecord(
                request_id=f"r{i}",
                ts=now - 3600 - (i / rows) * days * 86400,
                tenant="acme" if i % 2 else "globex",
                model="fraud",
                version="1",
                arm="champion",
                generation=1,
                entity_key=f"customer_id={i}",
                entity={"customer_id": i},
                features={"amount": float(i), "merchant": "m" * 300},
                score=0.5,
                label=i % 2,
                latency_ms=1.0,
            )
            out.write(ENCODER.encode(record) + b"\n")


def run_once(rows: int, days: int) -> str:
    import psycopg
    from sqlalchemy.engine import make_url

    from mlpipe import warehouse
    from mlpipe.config import Settings

    name = f"bench_retention_{uuid.uuid4().hex[:8]}"
    url = make_url(ADMIN_URL)
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    target = url.set(database=name).render_as_string(hide_password=False)
    db = psycopg.connect(target, autocommit=True)
    try:

        def megabytes() -> float:
            found = db.execute("SELECT pg_database_size(current_database())").fetchone()
            return found[0] / 1e6 if found else 0.0

        home = Path(tempfile.mkdtemp(prefix="bench-retention-"))
        pg = url.set(drivername="postgresql+psycopg", database=name)
        settings = Settings(home=home, warehouse_url=pg.render_as_string(hide_password=False))
        now = time.time()
        _segment(settings.predlog_path / "a" / "seg.jsonl", rows, days, now)
        started = time.perf_counter()
        warehouse.sync(settings)
        sync_s = time.perf_counter() - started
        db.execute("VACUUM ANALYZE")
        loaded_mb = megabytes()
        keep = settings.model_copy(update={"warehouse_retention_days": max(1, days // 2)})
        started = time.perf_counter()
        pruned = warehouse.prune(keep)
        prune_s = time.perf_counter() - started
        pruned_mb = megabytes()
        db.execute("VACUUM")
        vacuumed_mb = megabytes()
        replay = settings.predlog_path / "b" / "seg.jsonl"
        replay.parent.mkdir(parents=True)
        replay.write_bytes((settings.predlog_path / "a" / "seg.jsonl").read_bytes())
        started = time.perf_counter()
        again = warehouse.sync(settings)
        replay_s = time.perf_counter() - started
        dropped = getattr(pruned, "partitions", "-")
        return (
            f"sync {rows} rows over {days} days {sync_s:.2f}s ({rows / sync_s:,.0f} rows/s), "
            f"{loaded_mb:.0f} MB; prune to {keep.warehouse_retention_days} days {prune_s:.2f}s "
            f"({pruned.predictions} rows, {dropped} partitions) -> {pruned_mb:.0f} MB, "
            f"after VACUUM {vacuumed_mb:.0f} MB; the {rows} rows again {replay_s:.2f}s "
            f"(loaded {again.rows_loaded}, the rest replays)"
        )
    finally:  # the warehouse's engines pool nothing (NullPool): no connection is left open
        db.close()
        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.pg_retention", description=__doc__)
    p.add_argument("--rows", type=int, default=400_000)
    p.add_argument("--days", type=int, default=20)
    p.add_argument("--runs", type=int, default=1)
    args = p.parse_args(argv)
    for _ in range(args.runs):
        print(run_once(args.rows, args.days), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
