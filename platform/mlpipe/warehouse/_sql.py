"""SQL text the loaders share: the prediction key, the anti-join that keeps a loaded key out,
the count of rows whose request id another request holds; and a driver error's first line."""

from __future__ import annotations

KEY_COLUMNS = "request_id, tenant, model, arm"
KEY = f"({KEY_COLUMNS})"
# The row's key (request_id, tenant, model, arm) is in the table: the anti-join that keeps it out.
SAME_KEY = (
    "p.request_id = i.request_id AND p.tenant = i.tenant AND p.model = i.model AND p.arm = i.arm"
)
KNOWN = f"SELECT 1 FROM predictions p WHERE {SAME_KEY}"
# A row whose key the table holds for a request logged at another time (more than 1 ms
# apart: a replayed row read by the other loader may differ by a microsecond of rounding).
REUSED_US = 1000
# DuckDB's (``epoch_us``): rows of ``{source}`` whose key another request holds.
REUSED = (
    f"SELECT count(*) FROM {{source}} AS i WHERE EXISTS (SELECT 1 FROM predictions p "
    f"WHERE {SAME_KEY} AND abs(epoch_us(p.ts) - epoch_us(i.ts)) > {REUSED_US})"
)


def first_line(exc: BaseException | None) -> str:
    """The first line of a driver's error (its name where it has no text)."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
