"""A PostgreSQL warehouse put back to what an earlier migration left, for migration tests."""

from __future__ import annotations

from sqlalchemy import Connection


def unpartition_predictions(conn: Connection) -> None:
    """``predictions`` as migrations 1-10 left it on PostgreSQL: one plain table keyed by
    (request_id, tenant, model, arm), rows kept, no ``prediction_keys``; migration 11 undone."""
    conn.exec_driver_sql("CREATE TABLE predictions_plain (LIKE predictions INCLUDING DEFAULTS)")
    conn.exec_driver_sql("INSERT INTO predictions_plain SELECT * FROM predictions")
    conn.exec_driver_sql("DROP TABLE predictions")  # its partitions and its trigger with it
    conn.exec_driver_sql("DROP TABLE prediction_keys")
    conn.exec_driver_sql("DROP FUNCTION mlpipe_prediction_key_gone()")
    conn.exec_driver_sql("ALTER TABLE predictions_plain RENAME TO predictions")
    conn.exec_driver_sql(
        "ALTER TABLE predictions ADD CONSTRAINT predictions_pkey "
        "PRIMARY KEY (request_id, tenant, model, arm)"
    )
    conn.exec_driver_sql("DELETE FROM schema_migrations WHERE version >= 11")
