"""One code path for the synchronous and the asynchronous client.

Every operation is written once, as a generator that yields what it needs done — an HTTP
request (:class:`Req`) or a pause (:class:`Sleep`) — and receives the outcome; it returns the
operation's result. :func:`run_sync` drives one with ``httpx.Client`` and ``time.sleep``,
:func:`run_async` with ``httpx.AsyncClient`` and ``asyncio.sleep``. Retries (429 and 503
honouring ``Retry-After``, bounded), error mapping and parsing live in the generators.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from ._errors import AgentAddressError, from_answer

R = TypeVar("R")


@dataclass
class Req:
    """An HTTP request to make. ``token`` goes in ``Authorization: Bearer`` (never logged)."""

    method: str
    url: str
    token: str | None = field(default=None, repr=False)
    params: dict[str, str] | None = None
    json_body: Any = None
    has_json: bool = False
    content: bytes | None = None
    form: dict[str, str] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = 30.0
    # Stream a 2xx answer's body into this file (created exclusively) instead of reading it.
    stream_to: Path | None = None


@dataclass
class Resp:
    status: int
    headers: httpx.Headers
    content: bytes


@dataclass
class Failure:
    """No answer: the connection failed, dropped or timed out."""

    error: Exception


@dataclass
class Sleep:
    seconds: float


Instr = Req | Sleep
Outcome = Resp | Failure | None
Op = Generator[Instr, Outcome, R]


def _headers(req: Req) -> dict[str, str]:
    headers = {"accept": "application/json", **req.headers}
    if req.token is not None:
        headers["authorization"] = f"Bearer {req.token}"
    return headers


def _timeout(req: Req) -> httpx.Timeout:
    return httpx.Timeout(req.timeout, connect=10.0)


def _kwargs(req: Req) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "params": req.params,
        "headers": _headers(req),
        "timeout": _timeout(req),
    }
    if req.has_json:
        kw["content"] = json.dumps(req.json_body, ensure_ascii=False).encode()
        kw["headers"]["content-type"] = "application/json; charset=utf-8"
    elif req.form is not None:
        kw["data"] = req.form
    elif req.content is not None:
        kw["content"] = req.content
    return kw


def _open_exclusive(path: Path) -> Any:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise AgentAddressError(
            f"{path} exists already (a download never overwrites a file)", code="file_exists"
        ) from None
    return os.fdopen(fd, "wb")


def run_sync(http: httpx.Client, op: Op[R]) -> R:
    """Drives ``op`` with blocking I/O."""
    try:
        instr = next(op)
        while True:
            outcome: Outcome
            if isinstance(instr, Sleep):
                time.sleep(instr.seconds)
                outcome = None
            else:
                try:
                    with http.stream(instr.method, instr.url, **_kwargs(instr)) as r:
                        if instr.stream_to is not None and 200 <= r.status_code < 300:
                            with _open_exclusive(instr.stream_to) as f:
                                for chunk in r.iter_bytes():
                                    f.write(chunk)
                            content = b""
                        else:
                            content = r.read()
                        outcome = Resp(r.status_code, r.headers, content)
                except httpx.HTTPError as e:
                    outcome = Failure(e)
            instr = op.send(outcome)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def run_async(http: httpx.AsyncClient, op: Op[R]) -> R:
    """Drives ``op`` with asyncio."""
    try:
        instr = next(op)
        while True:
            outcome: Outcome
            if isinstance(instr, Sleep):
                await asyncio.sleep(instr.seconds)
                outcome = None
            else:
                try:
                    async with http.stream(instr.method, instr.url, **_kwargs(instr)) as r:
                        if instr.stream_to is not None and 200 <= r.status_code < 300:
                            with _open_exclusive(instr.stream_to) as f:
                                async for chunk in r.aiter_bytes():
                                    f.write(chunk)
                            content = b""
                        else:
                            content = await r.aread()
                        outcome = Resp(r.status_code, r.headers, content)
                except httpx.HTTPError as e:
                    outcome = Failure(e)
            instr = op.send(outcome)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def retry_after(resp: Resp) -> float | None:
    """``Retry-After`` in seconds (the delta form; an HTTP date is not used by the API)."""
    value = resp.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def parse_json(resp: Resp) -> Any:
    """The answer's JSON, or ``bad_response`` (an HTML error page from a proxy, say)."""
    try:
        return json.loads(resp.content)
    except (ValueError, UnicodeDecodeError):
        kind = resp.headers.get("content-type", "no content type")
        raise AgentAddressError(
            f"the server answered HTTP {resp.status} with a body that is not JSON ({kind}); "
            "is the URL an agentaddress server?",
            code="bad_response",
            status=resp.status,
            retry_after=retry_after(resp),
        ) from None


def error_of(resp: Resp) -> AgentAddressError:
    """The exception for an answer that is not a success."""
    after = retry_after(resp)
    if 300 <= resp.status < 400:
        return AgentAddressError(
            f"the server answered a redirect (HTTP {resp.status}), which is never followed "
            "(it could carry the token elsewhere): give the final URL",
            code="bad_response",
            status=resp.status,
        )
    try:
        body = json.loads(resp.content) if resp.content else None
    except (ValueError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return from_answer(resp.status, body, after)
    # Not the API's error: a gateway's or proxy's answer.
    code = {429: "rate_limited", 502: "unavailable", 503: "unavailable", 504: "unavailable"}.get(
        resp.status, "bad_response"
    )
    kind = resp.headers.get("content-type", "no content type")
    err = from_answer(
        resp.status, {"error": {"code": code, "message": f"HTTP {resp.status} ({kind})"}}, after
    )
    return err


@dataclass
class Policy:
    """How requests are retried."""

    max_retries: int = 4
    max_retry_wait: float = 60.0
    # The first pause after a failure without Retry-After, doubled each time.
    backoff: float = 0.5


def call(
    req: Req,
    policy: Policy,
    *,
    expect: tuple[int, ...] = (200,),
    retry_failures: bool = False,
) -> Op[Resp]:
    """Sends ``req``; 429 and 503 are retried honouring ``Retry-After`` (at most
    ``policy.max_retries`` times), failures to connect too when ``retry_failures``
    (idempotent requests). Returns the answer of an ``expect``ed status, else raises."""
    attempt = 0
    while True:
        outcome = yield req
        if isinstance(outcome, Failure):
            if retry_failures and attempt < policy.max_retries:
                yield Sleep(min(policy.backoff * 2**attempt, policy.max_retry_wait))
                attempt += 1
                continue
            raise AgentAddressError(
                f"no answer from the server: {type(outcome.error).__name__}",
                code="unreachable",
            ) from None
        assert isinstance(outcome, Resp)
        if outcome.status in expect:
            return outcome
        err = error_of(outcome)
        if outcome.status in (429, 503) and attempt < policy.max_retries:
            pause = err.retry_after if err.retry_after is not None else policy.backoff * 2**attempt
            if pause <= policy.max_retry_wait:
                yield Sleep(pause)
                attempt += 1
                continue
        raise err


def call_json(
    req: Req,
    policy: Policy,
    *,
    expect: tuple[int, ...] = (200,),
    retry_failures: bool = False,
) -> Op[Any]:
    resp = yield from call(req, policy, expect=expect, retry_failures=retry_failures)
    return parse_json(resp)


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A header of a plain mapping, by name without case."""
    for k, v in headers.items():
        if k.lower() == name:
            return v
    return None
