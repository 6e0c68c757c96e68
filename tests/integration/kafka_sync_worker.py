"""A ``warehouse sync`` of a Kafka topic that kills itself (SIGKILL) at one point of a batch.

``python -m tests.integration.kafka_sync_worker POINT`` with the settings in
``MLPIPE_*`` variables. The points are the three places where a crash could
split rows from their offsets: ``before_write`` (nothing of the batch written),
``after_write`` (rows and offsets written, the transaction not committed) and
``after_commit`` (the warehouse committed, Kafka not yet told). The process
dies with ``kill -9`` on the batch it is told to (``--batch``, 1-based), exactly
as an OOM-killed or evicted pod would.
"""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Callable
from typing import Any

from mlpipe.config import load_settings
from mlpipe.warehouse import _kafka, sync

POINTS = ("before_write", "after_write", "after_commit")


def _dies_on(batch: int, before: bool, fn: Callable[..., Any]) -> Callable[..., Any]:
    calls = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if before and calls[0] == batch:
            os.kill(os.getpid(), signal.SIGKILL)
        result = fn(*args, **kwargs)
        if not before and calls[0] == batch:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("point", choices=POINTS)
    parser.add_argument("--batch", type=int, default=2)
    args = parser.parse_args()
    if args.point == "before_write":
        _kafka._write_batch = _dies_on(args.batch, True, _kafka._write_batch)  # type: ignore[assignment]
    elif args.point == "after_write":
        _kafka._advance = _dies_on(args.batch, False, _kafka._advance)  # type: ignore[assignment]
    else:
        _kafka._mirror_to_kafka = _dies_on(args.batch, True, _kafka._mirror_to_kafka)  # type: ignore[assignment]
    sync(load_settings())
    raise SystemExit("the worker was meant to die before the sync finished")


if __name__ == "__main__":
    main()
