"""A refusal: an error answer on the request path, counted in ``mlpipe_rejected_requests``.

The front door, the overload gate, the intake and the gateway refuse requests
the same way, so the count by status on ``/metrics`` covers every refusal
whichever layer made it. (The auth layer counts its 401s and 429s per tenant
instead, in :class:`~mlpipe.serving.SecurityMetrics`; the Open Inference
Protocol layer's own 4xx are not counted, and neither is changed here.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mlpipe.serving._asgi import Send, send_json
from mlpipe.serving._runtime import RuntimeSlot


async def refuse(
    slot: RuntimeSlot,
    send: Send,
    body: dict[str, Any],
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Answer with the error ``body`` (its ``status`` is the HTTP status) and count it
    in the metrics of the runtime in ``slot`` (none before there is one)."""
    count_refusal(slot, body["status"])
    await send_json(send, body["status"], body, headers)


def count_refusal(slot: RuntimeSlot, status: int) -> None:
    """Count a refusal of ``status`` in the metrics of the runtime in ``slot`` (none before
    there is one); for one answered without :func:`refuse`."""
    rt = slot.runtime
    if rt is not None:
        rt.metrics.rejected.labels(str(status)).inc()


__all__ = ["count_refusal", "refuse"]
