"""A wake hook delivered by the server to a local receiver and checked with verify_wake
(docs/API.md §19)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from agentaddress_client import Client, InvalidSignature, verify_wake


def test_a_wake_verifies_and_a_tampered_one_does_not(client: Client) -> None:
    got: queue.Queue[tuple[dict[str, str], bytes]] = queue.Queue()

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            got.put((dict(self.headers), body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        a = client.create_address(task_id="woken")
        url = f"http://127.0.0.1:{httpd.server_address[1]}/wake"
        hook, secret = a.add_hook(url, types=["ci.*"])
        a.deliver({"type": "other"})
        a.deliver({"type": "ci.finished", "data": {"ok": True}})
        headers, body = got.get(timeout=20)
    finally:
        httpd.shutdown()
    wake = verify_wake(secret, headers, body)
    assert wake["type"] == "address.wake" and wake["hook_id"] == hook.id
    assert wake["address_id"] == a.id and wake["task_id"] == "woken"
    assert [e["type"] for e in wake["events"]] == ["ci.finished"]
    assert verify_wake(secret, headers, body.decode()) == wake  # str bodies too
    lower = {k.lower(): v for k, v in headers.items()}
    assert lower["webhook-id"] == f"{hook.id}_{wake['to_sequence']}"

    with pytest.raises(InvalidSignature):
        verify_wake(secret, headers, body.replace(b"ci.finished", b"ci.finishee"))
    other = "whsec_" + base64.b64encode(b"k" * 32).decode()
    with pytest.raises(InvalidSignature):
        verify_wake(other, headers, body)
    with pytest.raises(InvalidSignature):
        verify_wake(secret, {k: v for k, v in headers.items() if k.lower() != "webhook-id"}, body)
    with pytest.raises(InvalidSignature):  # a replay, an hour later
        verify_wake(secret, headers, body, now=time.time() + 3600)


def test_verify_wake_follows_standard_webhooks() -> None:
    key = b"0123456789abcdef0123456789abcdef"
    secret = "whsec_" + base64.b64encode(key).decode()
    body = b'{"type": "address.wake"}'
    ts = str(int(time.time()))
    sig = base64.b64encode(
        hmac.new(key, b"msg_1." + ts.encode() + b"." + body, hashlib.sha256).digest()
    ).decode()
    headers = {
        "Webhook-Id": "msg_1",
        "Webhook-Timestamp": ts,
        "Webhook-Signature": f"v1,bogus v1,{sig}",
    }
    assert verify_wake(secret, headers, body) == {"type": "address.wake"}
    with pytest.raises(InvalidSignature):
        verify_wake(secret, {**headers, "Webhook-Signature": f"v2,{sig}"}, body)
    with pytest.raises(InvalidSignature):
        verify_wake(secret, {**headers, "Webhook-Timestamp": "soon"}, body)
