"""``--alert-webhook``: POST a verdict as JSON to a URL (Slack-style ``text`` plus the details)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AlertResult:
    """A delivery attempt. ``url`` is redacted (:func:`redact_url`): it is printed and logged."""

    url: str
    delivered: bool
    status: int | None
    error: str | None


def redact_url(url: str) -> str:
    """``scheme://host[:port]/…``: a webhook's path and query are its secret (Slack, Teams)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<unparseable URL>"
    if not parts.scheme or not host:
        return "<unparseable URL>"
    rest = "/…" if (parts.path not in ("", "/") or parts.query or parts.fragment) else ""
    return f"{parts.scheme}://{host}{port}{rest}"


def post_verdict(url: str, payload: dict[str, Any], timeout_s: float = 10.0) -> AlertResult:
    """POST ``payload`` to ``url``; never raises: the caller reports a failed delivery.

    Nothing it returns holds the URL's path, query or credentials.
    """
    import json

    import httpx

    shown = redact_url(url)
    if not url.startswith(("http://", "https://")):
        return AlertResult(shown, False, None, "webhook URL must start with http:// or https://")
    try:
        body = json.dumps(payload, default=str)
        headers = {"content-type": "application/json"}
        response = httpx.post(url, content=body, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return AlertResult(shown, False, None, f"{type(exc).__name__}: {exc}".replace(url, shown))
    ok = 200 <= response.status_code < 300
    return AlertResult(shown, ok, response.status_code, None if ok else response.text[:200])


def verdict_payload(kind: str, model: str, verdict: str, details: dict[str, Any]) -> dict[str, Any]:
    return {
        "text": f"mlpipe {kind} {model}: {verdict}",
        "kind": kind,
        "model": model,
        "verdict": verdict,
        "details": details,
    }
