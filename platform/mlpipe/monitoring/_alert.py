"""``--alert-webhook``: POST a verdict as JSON to a URL (Slack-style ``text`` plus the details)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AlertResult:
    url: str
    delivered: bool
    status: int | None
    error: str | None


def post_verdict(url: str, payload: dict[str, Any], timeout_s: float = 10.0) -> AlertResult:
    """POST ``payload`` to ``url``; never raises: the caller reports a failed delivery."""
    import json

    import httpx

    if not url.startswith(("http://", "https://")):
        return AlertResult(url, False, None, "webhook URL must start with http:// or https://")
    try:
        body = json.dumps(payload, default=str)
        headers = {"content-type": "application/json"}
        response = httpx.post(url, content=body, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return AlertResult(url, False, None, f"{type(exc).__name__}: {exc}")
    ok = 200 <= response.status_code < 300
    return AlertResult(url, ok, response.status_code, None if ok else response.text[:200])


def verdict_payload(kind: str, model: str, verdict: str, details: dict[str, Any]) -> dict[str, Any]:
    return {
        "text": f"mlpipe {kind} {model}: {verdict}",
        "kind": kind,
        "model": model,
        "verdict": verdict,
        "details": details,
    }
