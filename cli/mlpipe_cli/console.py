"""The one place output is written: data to stdout, status and errors to stderr."""

from __future__ import annotations

import json
import os
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
# Tables written to a file or a pipe (`> drift.txt`) are as wide as their cells, not cut to
# the 80 columns rich assumes without a terminal; COLUMNS still sets a width.
_PIPED_WIDTH = 10_000


def print_json(value: Any) -> None:
    """Machine output: one JSON document on stdout, nothing else."""
    out.out(json.dumps(value, default=str, indent=2))


def status(message: str) -> None:
    err.print(message)


def error(message: str) -> None:
    err.print(f"[red]error:[/red] {escape(message)}")


# C0 controls but the newline, DEL and C1 controls: shown as \xNN, never sent to the terminal.
_CONTROLS = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)] if c != 0x0A}
# Zero-width and bidirectional formatting characters: shown as \uNNNN, so a value cannot
# hide in a table or reorder what follows it (issue 29, item 12; the gateway refuses them
# in ids and entity values, but older rows, reports and other columns may hold them).
_INVISIBLE = [*range(0x200B, 0x2010), *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0xFEFF]
_CONTROLS.update({c: f"\\u{c:04x}" for c in _INVISIBLE})


def table(title: str | None, columns: list[str], rows: list[list[Any]]) -> Table:
    """A table whose cells are plain text: values (often logged by clients) carry no
    rich markup and no terminal control codes through to the terminal."""
    t = Table(title=title, title_justify="left")
    for col in columns:
        t.add_column(_cell(col))
    for row in rows:
        t.add_row(*(_cell("" if v is None else str(v)) for v in row))
    return t


def _cell(value: str) -> Text:
    return Text(value.translate(_CONTROLS))


def show(renderable: Any) -> None:
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = _PIPED_WIDTH  # print(width=) alone is capped at the console's width
    out.print(renderable)


def number(value: Any) -> str:
    """A figure as shown in tables: floats to four significant digits, a missing one as ``-``."""
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def check_rows(checks: Any) -> list[list[Any]]:
    """One row per canary or shadow check: name, champion, candidate, threshold, result, detail."""
    result = {True: "pass", False: "FAIL", None: "-"}
    return [
        [c.name, number(c.champion), number(c.canary), c.threshold, result[c.passed], c.detail]
        for c in checks
    ]
