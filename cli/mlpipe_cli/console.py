"""The one place output is written: data to stdout, status and errors to stderr."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(value: Any) -> None:
    """Machine output: one JSON document on stdout, nothing else."""
    out.out(json.dumps(value, default=str, indent=2))


def status(message: str) -> None:
    err.print(message)


def error(message: str) -> None:
    err.print(f"[red]error:[/red] {escape(message)}")


def table(title: str | None, columns: list[str], rows: list[list[Any]]) -> Table:
    t = Table(title=title, title_justify="left")
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    return t


def show(renderable: Any) -> None:
    out.print(renderable)
