"""Answers the client must survive: 429/503 with Retry-After, a dropped connection mid-poll, a
server restart mid-iteration, HTML from a proxy, a redirect, unknown fields."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from agentaddress_client import AgentAddressError, Client, RateLimited

ERR_503 = {"error": {"code": "unavailable", "message": "Busy; retry."}}


def test_503_with_retry_after_is_retried(stub: Any, helpers: Any) -> None:
    s = stub(
        [
            helpers.answer(503, ERR_503, {"retry-after": "1"}),
            helpers.answer(200, helpers.page_json([helpers.event_json(1)])),
        ]
    )
    a = Client(s.base).address("addr_x", "aat_stubtoken")
    started = time.monotonic()
    page = a.poll()
    assert [e.sequence for e in page.events] == [1]
    assert time.monotonic() - started >= 0.9  # Retry-After was honoured
    assert len(s.requests) == 2
    assert b"authorization: Bearer aat_stubtoken" in s.requests[1]


def test_429_retries_are_bounded(stub: Any, helpers: Any) -> None:
    limited = {"error": {"code": "rate_limited", "message": "Slow down.", "retry_after_seconds": 0}}
    s = stub([helpers.answer(429, limited, {"retry-after": "0"})])
    a = Client(s.base, max_retries=2).address("addr_x", "aat_t")
    with pytest.raises(RateLimited) as e:
        a.state.get("k")
    assert e.value.status == 429 and e.value.retry_after == 0 and e.value.code == "rate_limited"
    assert len(s.requests) == 3
    # A Retry-After longer than the client's bound is not waited: raised at once.
    s2 = stub([helpers.answer(429, limited, {"retry-after": "3600"})])
    with pytest.raises(RateLimited) as e2:
        Client(s2.base).address("addr_x", "aat_t").poll()
    assert e2.value.retry_after == 3600 and len(s2.requests) == 1


def test_html_from_a_proxy_is_bad_response(stub: Any, helpers: Any) -> None:
    html = "<html><body><h1>502 Bad Gateway</h1></body></html>"
    s = stub([helpers.answer(200, html, content_type="text/html")])
    with pytest.raises(AgentAddressError) as e:
        Client(s.base).address("addr_x", "aat_t").poll()
    assert e.value.code == "bad_response" and e.value.status == 200
    s2 = stub([helpers.answer(500, html, content_type="text/html")])
    with pytest.raises(AgentAddressError) as e2:
        Client(s2.base).address("addr_x", "aat_t").ack("evt_1")
    assert e2.value.status == 500 and "aat_t" not in str(e2.value)
    s3 = stub([helpers.answer(200, {"events": "nope"})])
    with pytest.raises(AgentAddressError) as e3:
        Client(s3.base).address("addr_x", "aat_t").poll()
    assert e3.value.code == "bad_response"


def test_a_redirect_is_never_followed(stub: Any, helpers: Any) -> None:
    target = stub([helpers.answer(200, helpers.page_json([]))])
    s = stub([helpers.answer(302, "", {"location": f"{target.base}/steal"})])
    with pytest.raises(AgentAddressError) as e:
        Client(s.base).address("addr_x", "aat_t").poll()
    assert e.value.code == "bad_response" and e.value.status == 302
    assert target.requests == []


def test_unknown_fields_are_kept(stub: Any, helpers: Any) -> None:
    ev = helpers.event_json(1, type="future.kind", shiny={"new": 1}, priority=3)
    s = stub([helpers.answer(200, {**helpers.page_json([ev]), "server_hint": "x"})])
    page = Client(s.base).address("addr_x", "aat_t").poll()
    e = page.events[0]
    assert e.type == "future.kind" and e.raw["shiny"] == {"new": 1} and e.raw["priority"] == 3
    assert page.raw["server_hint"] == "x"


def test_a_dropped_connection_mid_poll_reconnects_with_the_cursor(stub: Any, helpers: Any) -> None:
    s = stub(
        [
            helpers.answer(200, helpers.page_json([helpers.event_json(5)], 4)),
            helpers.drop,
            helpers.drop,
            helpers.answer(200, helpers.page_json([helpers.event_json(6)], 5)),
        ]
    )
    a = Client(s.base).address("addr_x", "aat_t")
    got = []
    for e in a.events(after=4):
        got.append(e.sequence)
        if len(got) == 2:
            break
    assert got == [5, 6]
    afters = [r.split(b" ")[1].decode() for r in s.requests]
    assert "after=4" in afters[0] and all("after=5" in x for x in afters[1:]), afters
    # poll() (one read, idempotent) retries a dropped connection too, boundedly.
    s2 = stub([helpers.drop])
    with pytest.raises(AgentAddressError) as e:
        Client(s2.base, max_retries=1).address("addr_x", "aat_t").poll()
    assert e.value.code == "unreachable" and e.value.status is None


def test_a_server_restart_mid_iteration_loses_and_repeats_nothing(own_server: Any) -> None:
    c = Client(own_server.base)
    a = c.create_address()
    got: list[int] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            for e in Client(own_server.base).address(a.id, a._AddressCore__token).events():
                got.append(e.sequence)
                if len(got) == 6:
                    return
        except BaseException as e:  # reported below
            errors.append(e)

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    for n in range(3):
        a.deliver({"type": "before", "data": n})
    _until(lambda: len(got) == 3)
    time.sleep(0.5)  # the consumer is in its next long poll
    own_server.restart()  # killed mid-poll; the same port and database
    c2 = Client(own_server.base)
    assert a.inbox_url is not None
    for n in range(3):
        c2.deliver(a.inbox_url, {"type": "after", "data": n})
    t.join(timeout=30)
    assert not errors, errors
    assert got == [1, 2, 3, 4, 5, 6]


def test_events_timeout_survives_a_server_that_is_gone(stub: Any, helpers: Any) -> None:
    s = stub([helpers.drop])
    a = Client(s.base).address("addr_x", "aat_t")
    started = time.monotonic()
    assert list(a.events(timeout=1.5)) == []
    assert time.monotonic() - started < 10


def _until(cond: Any, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)
