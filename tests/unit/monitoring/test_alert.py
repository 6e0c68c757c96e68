"""``--alert-webhook``: a verdict as a Slack-style JSON body, delivery results that never
hold the URL's secret part, and the URL as it is shown (no server: httpx's ``post`` is
replaced where a delivery must succeed or be answered)."""

from __future__ import annotations

import json
from datetime import date
from typing import Any

import httpx
import pytest

from mlpipe.monitoring._alert import AlertResult, post_verdict, redact_url, verdict_payload

SECRET_URL = "https://user:pw@hooks.example.com:8443/services/T0/B1/s3cret?token=abc#frag"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (SECRET_URL, "https://hooks.example.com:8443/…"),
        ("https://example.com/", "https://example.com"),
        ("http://example.com?token=abc", "http://example.com/…"),
        ("http://example.com#x", "http://example.com/…"),
        ("example.com/hook", "<unparseable URL>"),
        ("http://[::1", "<unparseable URL>"),
        ("http://example.com:99999/x", "<unparseable URL>"),
    ],
)
def test_redact_url_keeps_scheme_host_and_port_only(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_the_payload_is_slack_text_plus_the_details() -> None:
    payload = verdict_payload("drift", "fraud", "fail", {"drift_share": 0.4})
    assert payload == {
        "text": "mlpipe drift fraud: fail",
        "kind": "drift",
        "model": "fraud",
        "verdict": "fail",
        "details": {"drift_share": 0.4},
    }


def test_a_url_that_is_not_http_is_not_posted_to() -> None:
    result = post_verdict("ftp://hooks.example.com/secret", {"text": "x"})
    assert result == AlertResult(
        "ftp://hooks.example.com/…", False, None, "webhook URL must start with http:// or https://"
    )


def test_a_refused_connection_is_reported_without_the_url_s_secret() -> None:
    url = "http://127.0.0.1:1/services/s3cret?token=abc"
    result = post_verdict(url, {"text": "x"}, timeout_s=5)
    assert (result.url, result.delivered, result.status) == ("http://127.0.0.1:1/…", False, None)
    assert result.error is not None and result.error.startswith("ConnectError: ")
    assert "s3cret" not in result.error and "token" not in result.error


class _Answer:
    """Stands in for ``httpx.post``: records the request and answers ``status``."""

    def __init__(self, status: int, text: str = "") -> None:
        self.status, self.text = status, text
        self.sent: list[dict[str, Any]] = []

    def __call__(self, url: str, **kwargs: Any) -> httpx.Response:
        self.sent.append({"url": url, **kwargs})
        return httpx.Response(self.status, text=self.text)


def test_a_2xx_answer_is_delivered_and_the_body_is_json(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = _Answer(204)
    monkeypatch.setattr(httpx, "post", answer)
    payload = verdict_payload("canary", "fraud", "pass", {"on": date(2026, 12, 6)})
    result = post_verdict(SECRET_URL, payload, timeout_s=3)
    assert result == AlertResult("https://hooks.example.com:8443/…", True, 204, None)
    (sent,) = answer.sent
    assert sent["url"] == SECRET_URL and sent["timeout"] == 3
    assert sent["headers"] == {"content-type": "application/json"}
    assert json.loads(sent["content"])["details"] == {"on": "2026-12-06"}  # default=str


def test_any_other_answer_is_not_delivered_with_the_start_of_its_body(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(httpx, "post", _Answer(404, "no_such_hook " + "x" * 300))
    result = post_verdict(SECRET_URL, {"text": "x"})
    assert (result.delivered, result.status) == (False, 404)
    assert result.error == ("no_such_hook " + "x" * 300)[:200]
