"""The client's surface against a real `agentaddress serve` (docs/API.md §1–§20)."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import agentaddress_client
from agentaddress_client import (
    AddressGone,
    AgentAddressError,
    Client,
    Event,
    RevisionConflict,
    Unauthorized,
)


def test_the_installed_package_is_tested_not_the_source_tree() -> None:
    where = Path(agentaddress_client.__file__).resolve()
    assert "site-packages" in where.parts, where
    assert (where.parent / "py.typed").exists()


def test_create_deliver_poll_ack(client: Client) -> None:
    a = client.create_address(name="surface", task_id="t-1", expires_in_seconds=3600)
    assert a.id.startswith("addr_")
    assert a.email is not None and a.email.startswith(a.id)
    assert a.inbox_url is not None and "/api/v1/inbox/" in a.inbox_url
    assert a.events_url == f"{client.base_url}/api/v1/addresses/{a.id}/events"
    assert a.name == "surface" and a.task_id == "t-1" and a.expires_at is not None

    d1 = client.deliver(a.inbox_url, {"type": "ci.finished", "data": {"ok": True}}, "k1")
    assert not d1.duplicate and d1.event.sequence == 1
    again = client.deliver(a.inbox_url, {"type": "ci.finished", "data": {"ok": True}}, "k1")
    assert again.duplicate and again.event.id == d1.event.id
    client.deliver(a.inbox_url, "plain text")
    client.deliver(a.inbox_url, b"\x00\x01", content_type="application/octet-stream")

    page = a.poll()
    assert [e.sequence for e in page.events] == [1, 2, 3]
    assert page.next_cursor == 3 and page.has_more is False
    first = page.events[0]
    assert isinstance(first, Event)
    assert first.type == "ci.finished" and first.data == {"ok": True}
    assert first.ingress_surface == "http" and first.http is not None
    assert page.events[1].data == {
        "content_type": "text/plain; charset=utf-8",
        "text": "plain text",
    }
    assert page.events[1].raw["type"] == "http.request"

    assert a.poll(after=2).events[0].sequence == 3
    assert a.poll(limit=1).has_more is True
    assert a.event(first.id).id == first.id

    acked = a.ack(first.id)
    assert acked.sequence == 1 and acked.acknowledged_at
    assert a.cursor == 1
    assert a.poll().events[0].sequence == 2  # after the cursor
    assert a.poll(after=0).events[0].acknowledged_at == acked.acknowledged_at


def test_long_poll_is_woken_by_a_delivery(client: Client) -> None:
    a = client.create_address()
    assert a.inbox_url is not None
    inbox = a.inbox_url
    threading.Timer(0.5, lambda: client.deliver(inbox, {"type": "late"})).start()
    started = time.monotonic()
    page = a.poll(wait=10)
    assert [e.type for e in page.events] == ["late"]
    assert time.monotonic() - started < 5


def test_filtered_poll_and_events_iteration(client: Client) -> None:
    a = client.create_address()
    for t in ["a.one", "b.two", "a.three"]:
        a.deliver({"type": t})
    page = a.poll(types=["a.*"])
    assert [e.type for e in page.events] == ["a.one", "a.three"]
    seen = [e.type for e in a.events(types="b.*", timeout=1)]
    assert seen == ["b.two"]
    seen_all = []
    for e in a.events(after=0, wait=1):
        seen_all.append(e.sequence)
        if len(seen_all) == 3:
            break
    assert seen_all == [1, 2, 3]


def test_unknown_event_types_are_kept(client: Client) -> None:
    a = client.create_address()
    a.deliver({"type": "vendor.brand_new", "source": "x", "data": {"k": [1, 2]}})
    a.deliver({"type": "other", "extra": True})
    events = a.poll().events
    assert events[0].type == "vendor.brand_new" and events[0].data == {"k": [1, 2]}
    assert events[1].data == {"type": "other", "extra": True}


def test_state(client: Client) -> None:
    a = client.create_address()
    assert a.state.get("k") == (None, None)
    r1 = a.state.put("k", {"n": 1})
    assert a.state.get("k") == ({"n": 1}, r1)
    with pytest.raises(RevisionConflict) as e:
        a.state.put("k", {"n": 2}, if_revision=r1 + 100)
    assert e.value.current_revision == r1 and e.value.status == 409
    with pytest.raises(RevisionConflict) as e0:
        a.state.put("k", 1, if_revision=0)
    assert e0.value.current_revision == r1
    r2 = a.state.put("k", None, if_revision=r1)  # null is a value
    assert a.state.get("k") == (None, r2)
    value, r3 = a.state.update("counter", lambda n: (n or 0) + 1)
    assert value == 1
    value, r4 = a.state.update("counter", lambda n: n + 1)
    assert value == 2 and r4 > r3
    keys = a.state.keys()
    assert sorted(k.key for k in keys.keys) == ["counter", "k"]
    with pytest.raises(RevisionConflict):
        a.state.delete("counter", if_revision=r3)
    deleted = a.state.delete("counter", if_revision=r4)
    assert deleted > r4
    assert a.state.get("counter") == (None, None)
    types = [e.type for e in a.poll(after=0).events]
    assert types.count("state.updated") == 4 and types[-1] == "state.deleted"


def test_update_retries_on_a_concurrent_writer(client: Client) -> None:
    a = client.create_address()
    a.state.put("n", 0)
    other = client.address(a.id, _token(a))
    calls = []

    def bump(n: Any) -> Any:
        calls.append(n)
        if len(calls) == 1:
            other.state.put("n", 100)  # a concurrent writer wins the first round
        return n + 1

    value, _ = a.state.update("n", bump)
    assert value == 101 and calls == [0, 100]
    with pytest.raises(RevisionConflict):
        a.state.update("n", lambda n: other.state.put("n", n + 10) and n, retries=2)


def test_ask_and_wait_for_answer(client: Client) -> None:
    a = client.create_address(name="asker")
    r = a.ask("Deploy?", body="Build **7**", options=["Deploy", "Hold"], expires_in_seconds=600)
    assert r.id.startswith("req_") and r.url and r.status == "open"
    assert r.options == ["Deploy", "Hold"]
    assert a.request(r.id).url is None  # the page's URL is in the creation's answer only
    with pytest.raises(AgentAddressError) as timed_out:
        a.wait_for_answer(r.id, timeout=0.5)
    assert timed_out.value.code == "timed_out"
    url = r.url

    def person() -> None:
        time.sleep(0.5)
        page = httpx.get(url)
        assert "Deploy?" in page.text
        httpx.post(url, data={"choice": "Deploy", "comment": "ship it"})

    threading.Thread(target=person).start()
    done = a.wait_for_answer(r.id, timeout=20)
    assert done.status == "answered" and done.answer is not None
    assert done.answer.choice == "Deploy" and done.answer.comment == "ship it"
    answered = a.poll(types="request.answered").events
    assert answered[0].data["request_id"] == r.id


def test_hooks_and_timers(client: Client) -> None:
    a = client.create_address()
    hook, secret = a.add_hook("http://127.0.0.1:9/never", types=["ci.*"], headers={"x-t": "v"})
    assert secret.startswith("whsec_") and hook.types == ["ci.*"]
    assert hook.header_names == ["x-t"] and a.hook_secrets[hook.id] == secret
    assert [h.id for h in a.hooks()] == [hook.id]
    assert a.set_hook_status(hook.id, "paused").status == "paused"
    a.remove_hook(hook.id)
    assert a.hooks() == []

    t = a.set_timer(3600, type="timer.remind", data={"why": "x"}, idempotency_key="t1")
    assert t.status == "pending" and t.type == "timer.remind" and t.data == {"why": "x"}
    same = a.set_timer(3600, type="timer.remind", data={"why": "x"}, idempotency_key="t1")
    assert same.id == t.id
    assert [x.id for x in a.timers()] == [t.id]
    assert a.cancel_timer(t.id).status == "cancelled"
    listy = a.set_timer(3600, data=[1, "two"])  # any JSON, as docs/API.md §20 says
    assert listy.data == [1, "two"]
    a.cancel_timer(listy.id)

    soon = a.set_timer(1)
    fired = next(iter(a.events(types="timer.*", wait=10, timeout=15)))
    assert fired.type == "timer.fired" and fired.data["timer_id"] == soon.id
    with pytest.raises(AgentAddressError) as e:
        a.cancel_timer(soon.id)
    assert e.value.code == "timer_fired"


def test_create_with_hooks_and_verification(client: Client) -> None:
    a = client.create_address(
        hooks=[{"url": "http://127.0.0.1:9/h", "types": ["x.*"]}],
        verification={"scheme": "github", "secret": "s3cret"},
    )
    assert len(a.hook_secrets) == 1
    info = a.inspect()
    assert info["address"]["verification"]["scheme"] == "github"


def test_errors(client: Client) -> None:
    a = client.create_address()
    token = _token(a)
    wrong = client.address(a.id, token + "x")
    with pytest.raises(Unauthorized) as e:
        wrong.poll()
    assert e.value.status == 401 and e.value.code == "unauthorized" and e.value.message
    with pytest.raises(AgentAddressError) as nf:
        a.ack("evt_unknown")
    assert nf.value.code == "not_found" and nf.value.status == 404
    with pytest.raises(AgentAddressError) as bad:
        a.state.put("no spaces", 1)
    assert bad.value.code == "invalid_request"
    a.delete()
    with pytest.raises(AddressGone) as gone:
        a.poll()
    assert gone.value.status == 410
    for err in (e.value, nf.value, bad.value, gone.value):
        assert token not in str(err) and token not in repr(err)


def test_the_read_token_is_never_shown(client: Client, home: Path) -> None:
    a = client.create_address(name="secret")
    token = _token(a)
    a.save("shown")
    loaded = Client(client.base_url).load("shown")
    r = a.ask("q?")
    for obj in (a, loaded, a.state, client, a.poll(), r):
        assert token not in repr(obj) and token not in str(obj)
    assert r.url is not None and r.url not in repr(r)  # the person's capability neither
    assert a.inbox_url is not None and a.inbox_url not in repr(a)


def test_attachment_download_is_streamed_to_a_file(
    client: Client, tmp_path: Path, helpers: Any
) -> None:
    a = client.create_address()
    blob = bytes(range(256)) * 400
    import base64

    raw = (
        "From: ada@example.com\r\nTo: {to}\r\nSubject: files\r\nMessage-ID: <f@example.com>\r\n"
        'Content-Type: multipart/mixed; boundary="b"\r\n\r\n'
        "--b\r\nContent-Type: text/plain\r\n\r\nA file.\r\n"
        "--b\r\nContent-Type: application/octet-stream\r\n"
        'Content-Disposition: attachment; filename="blob.bin"\r\n'
        "Content-Transfer-Encoding: base64\r\n\r\n{b64}\r\n--b--\r\n"
    ).format(to=a.email, b64=base64.encodebytes(blob).decode().replace("\n", "\r\n"))
    r = httpx.post(
        f"{client.base_url}/api/v1/email/inbound",
        params={"rcpt": a.email or ""},
        headers={"authorization": f"Bearer {helpers.ingest_secret}"},
        content=raw.encode(),
    )
    assert r.status_code == 200, r.text
    event = a.poll(types="email.received").events[0]
    att = event.data["attachments"][0]
    out = a.download_attachment(event.id, att["id"], tmp_path / "blob.bin")
    assert hashlib.sha256(out.read_bytes()).digest() == hashlib.sha256(blob).digest()
    assert (out.stat().st_mode & 0o077) == 0
    with pytest.raises(AgentAddressError) as exists:
        a.download_attachment(event.id, att["id"], out)
    assert exists.value.code == "file_exists"
    raw_file = a.download_raw(event.id, tmp_path / "m.eml")
    assert b"Subject: files" in raw_file.read_bytes()
    plain = a.deliver({"type": "x"})
    with pytest.raises(AgentAddressError) as unavailable:
        a.download_raw(plain.event.id, tmp_path / "x.eml")
    assert unavailable.value.code == "attachment_unavailable"
    assert not (tmp_path / "x.eml").exists()


def _token(a: Any) -> str:
    token: str = a._AddressCore__token
    return token
