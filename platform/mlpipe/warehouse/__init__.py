"""The warehouse: prediction log, outcomes, deployment mirror and report index in one SQL database.

DuckDB through SQLAlchemy Core by default (``settings.warehouse``); PostgreSQL by
changing the URL. Tables are created by the tool's own migrations on first use.
Every call opens the database only for as long as it needs it and waits
(bounded, reported through ``notify``) when another process holds DuckDB's lock.
"""

from mlpipe.warehouse._engine import Notify, read, write
from mlpipe.warehouse._figures import ArmFigures, arm_figures
from mlpipe.warehouse._kafka import PartitionLag, follow, topic_lag
from mlpipe.warehouse._mirror import DeploymentChange, HistorySource, mirrored_generations
from mlpipe.warehouse._outcomes import ACCEPTED_COLUMNS, OutcomesResult, load_outcomes
from mlpipe.warehouse._read import (
    PredictionWindow,
    QueryResult,
    models_in_warehouse,
    prediction_window,
    query,
)
from mlpipe.warehouse._release import LogUsage, log_usage
from mlpipe.warehouse._reports import ReportEntry, list_reports, record_reports
from mlpipe.warehouse._retention import (
    Pruned,
    PruneMark,
    check_retention_days,
    latest_prune_cutoff,
    prune,
    prune_marks,
    set_tenant_retention,
    tenant_retention,
)
from mlpipe.warehouse._schema import metadata
from mlpipe.warehouse._segments import SkippedLine, parse_segment
from mlpipe.warehouse._status import WarehouseStatus, status
from mlpipe.warehouse._sync import SyncResult, sync
from mlpipe.warehouse._tenant_data import (
    AuditEntry,
    ExportResult,
    PurgeResult,
    export_tenant,
    purge_tenant,
    tenant_audit,
)

__all__ = [
    "ACCEPTED_COLUMNS",
    "ArmFigures",
    "AuditEntry",
    "DeploymentChange",
    "ExportResult",
    "HistorySource",
    "LogUsage",
    "Notify",
    "OutcomesResult",
    "PartitionLag",
    "PredictionWindow",
    "PruneMark",
    "Pruned",
    "PurgeResult",
    "QueryResult",
    "ReportEntry",
    "SkippedLine",
    "SyncResult",
    "WarehouseStatus",
    "arm_figures",
    "check_retention_days",
    "export_tenant",
    "follow",
    "latest_prune_cutoff",
    "list_reports",
    "load_outcomes",
    "log_usage",
    "metadata",
    "mirrored_generations",
    "models_in_warehouse",
    "parse_segment",
    "prediction_window",
    "prune",
    "prune_marks",
    "purge_tenant",
    "query",
    "read",
    "record_reports",
    "set_tenant_retention",
    "status",
    "sync",
    "tenant_audit",
    "tenant_retention",
    "topic_lag",
    "write",
]
