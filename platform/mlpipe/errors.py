"""The one exception tree of mlpipe.

Adapters translate library errors into these (always ``raise ... from exc``); the
CLI maps them to exit codes in one place and the gateway to HTTP statuses in one
place. ``exit_code`` and ``http_status`` live on the class so neither boundary
needs a table of its own.
"""

from __future__ import annotations


class MlpipeError(Exception):
    """Base of every error mlpipe raises on purpose."""

    exit_code: int = 2
    http_status: int = 500


class InvalidInput(MlpipeError):
    """The caller asked for something malformed or impossible."""

    exit_code = 2
    http_status = 422


class NotFound(InvalidInput):
    """A named model, version, deployment or file does not exist."""

    http_status = 404


class ConfigError(InvalidInput):
    """Settings could not be read or validated (names the file and the field)."""


class Conflict(MlpipeError):
    """A concurrent change won: the state read is no longer current."""

    exit_code = 1
    http_status = 409


class RolloutHeld(Conflict):
    """A running (or abandoned) rollout holds the model: the change was refused, nothing changed.

    The caller's mistake rather than a race lost, so the CLI exits 2; the message
    names the rollout and the way to end it.
    """

    exit_code = 2


class CheckFailed(MlpipeError):
    """A check ran and said no (drift found, canary analysis failed)."""

    exit_code = 1
    http_status = 409


class IntegrityError(MlpipeError):
    """An artifact's bytes do not match the hash its registry version records."""

    exit_code = 1
    http_status = 500


class StoreUnavailable(MlpipeError):
    """A store (registry, control plane, feature store, warehouse) cannot be reached."""

    exit_code = 3
    http_status = 503


class StoreBusy(StoreUnavailable):
    """A store answered but stayed contended (locked) through every retry.

    Nothing was changed, so the same call can simply be run again; the message says so.
    """


__all__ = [
    "CheckFailed",
    "ConfigError",
    "Conflict",
    "IntegrityError",
    "InvalidInput",
    "MlpipeError",
    "NotFound",
    "RolloutHeld",
    "StoreBusy",
    "StoreUnavailable",
]
