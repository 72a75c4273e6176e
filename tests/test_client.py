"""kubeforge.runtime.client's reading of refused requests: a Status object's reason and message,
else the code's reason and the plain body's first line (an API server's max-in-flight and APF
rejections answer 429 in plain text: found by the throttling test, issue 31)."""

from __future__ import annotations

import json

import pytest

from kubeforge.runtime.client import _error


@pytest.mark.parametrize("code, raw, reason, message, transient", [
    (422, json.dumps({"kind": "Status", "reason": "Invalid", "message": "spec.x: Invalid value"}).encode(),
     "Invalid", "spec.x: Invalid value", False),
    (429, b"Too many requests, please try again later.\n", "TooManyRequests",
     "Too many requests, please try again later.", True),
    (503, b"", "ServiceUnavailable", "HTTP 503", True),
    (404, b"not json at all", "NotFound", "not json at all", False),
    (500, b"x" * 5000, "Error", "x" * 1024, True),
])
def test_a_refusal_names_its_reason_and_message(code, raw, reason, message, transient):
    e = _error(code, raw)
    assert (e.code, e.reason, e.message, e.transient) == (code, reason, message, transient)
