"""A plain HTML page for a verdict document (canary, shadow): the figures, escaped, no scripts.

Drift reports are Evidently's own HTML; a canary or shadow analysis is a
handful of checks and figures, so its page is the JSON document laid out as
tables, readable in any browser and in CI artifacts.

Evidently embeds its figures as JSON in a ``<script>`` block without escaping
``</`` or ``<!--``, and those figures hold client values (categories, column
names), so :func:`write_evidently_html` escapes them before the page is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from mlpipe.errors import MlpipeError

# Evidently's data block: one ``var <name> = <json>;`` line per object, in <head>.
# json.dumps writes no raw newline, so a client value can neither end nor add a line.
_DATA_LINE = re.compile(r"^(\s*var [A-Za-z_$][\w$]* = )(.+);$")
_JSON_HTML_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"}
# Evidently's drift words, as JSON text, and what they mean where mlpipe set the thresholds:
# a column past its calibrated threshold is a significant shift, which alarms only with an
# effect past the minimum (the verdict at the top of the page says which did).
_RELABEL = (
    (re.compile(r'"Detected"'), '"significant"'),
    (re.compile(r'"Not Detected"'), '"not significant"'),
    (re.compile(r'"title": "Data Drift"'), '"title": "Shift (calibrated threshold)"'),
    (
        re.compile(r"Dataset Drift is (NOT )?detected\. Dataset drift detection threshold is "),
        "Share of significant shifts vs mlpipe's drift share threshold (the verdict is "
        "mlpipe's, at the top of the page): ",
    ),
    (re.compile(r"Drift is detected for "), "Significant shift in "),
    (re.compile(r"Value Drift for column "), "Significant shift in column "),
    (re.compile(r"Share of Drifted Columns"), "Share of significantly shifted columns"),
    (re.compile(r'"Drifted Columns"'), '"Significantly shifted columns"'),
)
_BANNER_STYLE = (
    "font-family:sans-serif;margin:1em;padding:1em;border:2px solid #333;"
    "background:#fffbe6;overflow-wrap:anywhere"
)

_STYLE = (
    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0;"
    "table-layout:fixed;width:100%;display:block;overflow-x:auto}"
    # overflow-wrap alone: its alias word-wrap after it (break-word) would win, and break-word
    # does not let a long cell shrink its column, so a wide table ran off its box
    "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;overflow-wrap:anywhere}"
    "th{background:#f4f4f4}"
)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return escape(f"{value:.6g}")
    return escape("-" if value is None else str(value))


def _rows_table(rows: Sequence[Mapping[str, Any]]) -> str:
    columns = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _pairs_table(pairs: Mapping[str, Any]) -> str:
    body = "".join(
        f"<tr><th>{escape(str(k))}</th><td>{_cell(v)}</td></tr>" for k, v in pairs.items()
    )
    return f"<table>{body}</table>"


def verdict_page(
    title: str, document: Mapping[str, Any], first: str, headings: Mapping[str, str] | None = None
) -> str:
    """``document`` as HTML: its scalar fields, then ``first`` and every other table in it,
    each under its heading in ``headings`` (default: its key)."""
    scalars = {k: v for k, v in document.items() if not isinstance(v, (list, dict))}
    parts = [f"<h1>{escape(title)}</h1>", _pairs_table(scalars)]
    keys = [first, *(k for k in document if k != first)]
    for key in keys:
        value = document.get(key)
        heading = f"<h2>{escape((headings or {}).get(key, key))}</h2>"
        if isinstance(value, list) and value and all(isinstance(r, Mapping) for r in value):
            parts += [heading, _rows_table(value)]
        elif isinstance(value, list) and value:
            parts += [heading, _pairs_table({str(i): v for i, v in enumerate(value)})]
        elif isinstance(value, Mapping) and value:
            parts += [heading, _pairs_table(value)]
    body = "\n".join(parts)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>\n{body}\n</body></html>\n"
    )


def _escape_json(text: str) -> str:
    # In valid JSON these characters only occur inside strings, where \uXXXX means the same.
    return re.sub("[<>&]", lambda m: _JSON_HTML_ESCAPES[m.group()], text)


def escape_evidently_data(page: str) -> str:
    """Evidently's ``page`` with the JSON it embeds unable to close or confuse its ``<script>``.

    Raises ``MlpipeError`` where the page holds no data block where Evidently puts it
    (a changed template): a report that might be unsafe is not written.
    """
    lines = page.split("\n")
    escaped = 0
    for i, line in enumerate(lines):
        if line.strip() == "<body>":
            break
        match = _DATA_LINE.match(line)
        if match:
            lines[i] = f"{match.group(1)}{_escape_json(_relabel(match.group(2)))};"
            escaped += 1
    if not escaped:
        raise MlpipeError("Evidently's HTML has no data block where expected: report not written")
    return "\n".join(lines)


def _relabel(data: str) -> str:
    for pattern, words in _RELABEL:
        data = pattern.sub(words, data)
    return data


def with_banner(page: str, banner: Sequence[str]) -> str:
    """``page`` with ``banner`` (a headline, then lines), escaped, first in its ``<body>``."""
    if not banner:
        return page
    head, *rest = banner
    lines = "".join(f"<p>{escape(line)}</p>" for line in rest)
    block = f"<div id='mlpipe-verdict' style='{_BANNER_STYLE}'><h2>{escape(head)}</h2>{lines}</div>"
    before, body, after = page.partition("<body>")
    if not body:
        raise MlpipeError("Evidently's HTML has no <body>: report not written")
    return f"{before}{body}\n{block}{after}"


def write_evidently_html(snapshot: Any, path: Path, banner: Sequence[str] = ()) -> None:
    """Write an Evidently snapshot's standalone HTML to ``path``, its embedded data escaped and
    its drift words relabelled as mlpipe judges them, led by ``banner`` (mlpipe's verdict)."""
    page = escape_evidently_data(snapshot.get_html_str(as_iframe=False))
    path.write_text(with_banner(page, banner), "utf-8")
