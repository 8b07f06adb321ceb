"""``Client`` / ``AsyncClient`` and the address handles (docs/API.md; the surface is §23)."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx

from . import _credentials as creds
from ._core import (
    Failure,
    Op,
    Policy,
    Req,
    Resp,
    Sleep,
    call,
    call_json,
    error_of,
    parse_json,
    run_async,
    run_sync,
)
from ._errors import AgentAddressError, RevisionConflict
from ._models import (
    Acked,
    CreatedAddress,
    Delivery,
    Event,
    Hook,
    HookCreated,
    Page,
    PersonRequest,
    StateDelete,
    StateList,
    StateValue,
    StateWrite,
    Timer,
    body,
)

DEFAULT_URL = "http://127.0.0.1:8080"
MAX_WAIT = 25.0
# Reconnection after a dropped connection or a server restart: 0.5 s doubling to 30 s.
RECONNECT_FIRST = 0.5
RECONNECT_MAX = 30.0


def _seg(value: str) -> str:
    return quote(value, safe="")


def _unwrap(doc: Any, key: str) -> Any:
    if not isinstance(doc, dict) or key not in doc:
        raise AgentAddressError(f"unexpected answer: no `{key}`", code="bad_response")
    return doc[key]


def _types_param(types: str | Sequence[str] | None) -> str | None:
    if types is None:
        return None
    if isinstance(types, str):
        return types
    return ",".join(types)


def _num(seconds: float) -> str:
    return f"{seconds:.3f}".rstrip("0").rstrip(".") or "0"


class _ClientBase:
    def __init__(
        self,
        base_url: str | None,
        *,
        timeout: float,
        max_retries: int,
        max_retry_wait: float,
    ) -> None:
        env = os.environ.get("AGENTADDRESS_URL") or None
        self._explicit = base_url is not None or env is not None
        chosen = base_url or env or DEFAULT_URL
        if not chosen.startswith(("http://", "https://")):
            raise AgentAddressError("the server URL must be http:// or https://", code="usage")
        self.base_url = chosen.rstrip("/")
        self.timeout = timeout
        self.policy = Policy(max_retries=max_retries, max_retry_wait=max_retry_wait)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    # --- operations as generators (the one code path) ---

    def _op_create(
        self,
        name: str | None,
        task_id: str | None,
        expires_in_seconds: int | None,
        verification: dict[str, Any] | None,
        hooks: Sequence[dict[str, Any]] | None,
    ) -> Op[CreatedAddress]:
        payload = body(
            "CreateAddressRequest",
            name=name,
            task_id=task_id,
            expires_in_seconds=expires_in_seconds,
            verification=verification,
            hooks=[body("HookRequest", **h) for h in hooks] if hooks is not None else None,
        )
        req = Req(
            "POST",
            f"{self.base_url}/api/v1/addresses",
            json_body=payload,
            has_json=True,
            timeout=self.timeout,
        )
        doc = yield from call_json(req, self.policy, expect=(201,))
        return CreatedAddress.from_json(doc)

    def _op_deliver(
        self,
        inbox_url: str,
        payload: Any,
        idempotency_key: str | None,
        content_type: str | None,
    ) -> Op[Delivery]:
        req = Req("POST", inbox_url, timeout=self.timeout)
        if isinstance(payload, (bytes, bytearray)):
            req.content = bytes(payload)
        elif isinstance(payload, str):
            req.content = payload.encode()
            req.headers["content-type"] = "text/plain; charset=utf-8"
        else:
            req.json_body, req.has_json = payload, True
        if content_type is not None:
            req.headers["content-type"] = content_type
        if idempotency_key is not None:
            req.headers["idempotency-key"] = idempotency_key
        doc = yield from call_json(
            req, self.policy, expect=(200, 202), retry_failures=idempotency_key is not None
        )
        return Delivery.from_json(doc)

    def _loaded(self, task: str) -> dict[str, Any]:
        saved = creds.load(task)
        if not self._explicit:
            saved = {**saved, "_request_base": saved["base_url"]}
        return saved


class _AddressCore:
    """What an address handle knows, and its operations as generators."""

    def __init__(
        self,
        *,
        base_url: str,
        id: str,
        read_token: str,
        policy: Policy,
        timeout: float,
        email: str | None = None,
        inbox_url: str | None = None,
        name: str | None = None,
        task_id: str | None = None,
        created_at: str | None = None,
        expires_at: str | None = None,
        task: str | None = None,
        cursor: int = 0,
        hook_secrets: dict[str, str] | None = None,
        saved_base_url: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.id = id
        self.__token = read_token
        self._policy = policy
        self._timeout = timeout
        self.email = email
        self.inbox_url = inbox_url
        self.name = name
        self.task_id = task_id
        self.created_at = created_at
        self.expires_at = expires_at
        #: The task whose credentials file this handle was loaded from or saved to.
        self.task = task
        #: The saved cursor (docs/CLI.md, ``ack``): where ``poll``/``events`` start by default.
        self.cursor = cursor
        #: Signing secrets of the wake hooks this handle made, by hook id.
        self.hook_secrets: dict[str, str] = dict(hook_secrets or {})
        self._saved_base_url = saved_base_url or self.base_url
        # Fields of the credentials file this version does not know: written back as they are.
        self._extra: dict[str, Any] = dict(extra or {})

    @property
    def root(self) -> str:
        return f"{self.base_url}/api/v1/addresses/{_seg(self.id)}"

    @property
    def events_url(self) -> str:
        return f"{self.root}/events"

    @property
    def state_url(self) -> str:
        return f"{self.root}/state"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, email={self.email!r}, task={self.task!r})"

    __str__ = __repr__

    def _req(self, method: str, path: str, **kw: Any) -> Req:
        kw.setdefault("timeout", self._timeout)
        return Req(method, f"{self.root}{path}", token=self.__token, **kw)

    # --- credentials ---

    def _credentials(self, task: str) -> dict[str, Any]:
        data: dict[str, Any] = {
            **self._extra,
            "version": creds.FORMAT_VERSION,
            "task": task,
            "base_url": self._saved_base_url,
            "address_id": self.id,
            "read_token": self.__token,
            "inbox_url": self.inbox_url or "",
            "email": self.email or "",
            "name": self.name,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "cursor": self.cursor,
        }
        if self.hook_secrets:
            data["hook_secrets"] = dict(sorted(self.hook_secrets.items()))
        return data

    def save(self, task: str, *, overwrite: bool = False) -> Path:
        """Saves the credentials as the CLI's file of ``task`` (docs/CLI.md): the CLI and a
        later ``Client.load(task)`` pick it up. Refuses a task that has a file already
        (``task_exists``) unless ``overwrite``."""
        path = creds.save(task, self._credentials(task), replace=overwrite)
        self.task = task
        return path

    def _update_saved(self, change: Callable[[dict[str, Any]], None]) -> None:
        if self.task is None:
            return
        current = creds.load(self.task)
        if current.get("address_id") != self.id:
            return
        change(current)
        creds.save(self.task, current, replace=True)

    def _after_ack(self, acked: Acked) -> None:
        if acked.sequence > self.cursor:
            self.cursor = acked.sequence

        def move(saved: dict[str, Any]) -> None:
            old = saved.get("cursor")
            old = old if isinstance(old, int) else 0
            saved["cursor"] = max(old, acked.sequence)

        self._update_saved(move)

    def _after_hook(self, hook: Hook, secret: str) -> None:
        self.hook_secrets[hook.id] = secret

        def add(saved: dict[str, Any]) -> None:
            secrets = saved.get("hook_secrets")
            secrets = dict(secrets) if isinstance(secrets, dict) else {}
            secrets[hook.id] = secret
            saved["hook_secrets"] = dict(sorted(secrets.items()))

        self._update_saved(add)

    # --- feed ---

    def _poll_req(self, after: int, wait: float, types: Any, limit: int | None) -> Req:
        params = {"after": str(after), "wait": _num(min(max(wait, 0.0), MAX_WAIT))}
        t = _types_param(types)
        if t is not None:
            params["types"] = t
        if limit is not None:
            params["limit"] = str(limit)
        return self._req("GET", "/events", params=params, timeout=self._timeout + wait)

    def _op_poll(self, after: int | None, wait: float, types: Any, limit: int | None) -> Op[Page]:
        req = self._poll_req(self.cursor if after is None else after, wait, types, limit)
        doc = yield from call_json(req, self._policy, retry_failures=True)
        return Page.from_json(doc)

    def _op_next_page(
        self, after: int, wait: float, types: Any, limit: int | None, deadline: float | None
    ) -> Op[Page]:
        """One page for ``events()``: a dropped connection, a server restart, 429 and 503 are
        waited out (backoff, ``Retry-After``) with the same cursor; other errors raise."""
        pause = RECONNECT_FIRST
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            w = wait if left is None else max(0.0, min(wait, left))
            outcome = yield self._poll_req(after, w, types, limit)
            retry: float | None = None
            if isinstance(outcome, Failure):
                retry = pause
                pause = min(pause * 2, RECONNECT_MAX)
            else:
                assert isinstance(outcome, Resp)
                if outcome.status == 200:
                    return Page.from_json(parse_json(outcome))
                err = error_of(outcome)
                if outcome.status not in (429, 503) and not (502 <= outcome.status <= 504):
                    raise err
                retry = err.retry_after if err.retry_after is not None else pause
                pause = min(pause * 2, RECONNECT_MAX)
            if deadline is not None and time.monotonic() + retry > deadline:
                return Page(events=[], next_cursor=after, has_more=False)
            yield Sleep(retry)

    def _op_event(self, event_id: str) -> Op[Event]:
        doc = yield from call_json(
            self._req("GET", f"/events/{_seg(event_id)}"), self._policy, retry_failures=True
        )
        return Event.from_json(_unwrap(doc, "event"))

    def _op_ack(self, event_id: str) -> Op[Acked]:
        doc = yield from call_json(
            self._req("POST", f"/events/{_seg(event_id)}/ack"), self._policy, retry_failures=True
        )
        return Acked.from_json(_unwrap(doc, "event"))

    # --- state ---

    def _op_state_get(self, key: str) -> Op[tuple[Any, int | None]]:
        req = self._req("GET", f"/state/{_seg(key)}")
        resp = yield from call(req, self._policy, expect=(200, 404), retry_failures=True)
        if resp.status == 404:
            err = error_of(resp)
            if err.code == "not_found":
                return (None, None)
            raise err
        sv = StateValue.from_json(parse_json(resp))
        return (sv.value, sv.revision)

    def _op_state_put(self, key: str, value: Any, if_revision: int | None) -> Op[StateWrite]:
        payload = body("PutStateRequest", value=value, if_revision=if_revision)
        req = self._req("PUT", f"/state/{_seg(key)}", json_body=payload, has_json=True)
        doc = yield from call_json(req, self._policy, retry_failures=if_revision is not None)
        return StateWrite.from_json(doc)

    def _op_state_delete(self, key: str, if_revision: int | None) -> Op[StateDelete]:
        params = {"if_revision": str(if_revision)} if if_revision is not None else None
        req = self._req("DELETE", f"/state/{_seg(key)}", params=params)
        doc = yield from call_json(req, self._policy)
        return StateDelete.from_json(doc)

    def _op_state_keys(self) -> Op[StateList]:
        doc = yield from call_json(self._req("GET", "/state"), self._policy, retry_failures=True)
        return StateList.from_json(doc)

    def _op_state_update(
        self, key: str, fn: Callable[[Any], Any], retries: int
    ) -> Op[tuple[Any, int]]:
        attempt = 0
        while True:
            value, revision = yield from self._op_state_get(key)
            new = fn(value)
            try:
                written = yield from self._op_state_put(
                    key, new, 0 if revision is None else revision
                )
            except RevisionConflict:
                attempt += 1
                if attempt > retries:
                    raise
                continue
            return (written.value, written.revision)

    # --- requests for a person ---

    def _op_ask(
        self,
        title: str,
        body_text: str | None,
        options: Sequence[str] | None,
        expires_in_seconds: int | None,
        comment: str | None,
        idempotency_key: str | None,
    ) -> Op[PersonRequest]:
        payload = body(
            "CreateRequestBody",
            title=title,
            body=body_text,
            options=list(options) if options is not None else None,
            comment=comment,
            expires_in_seconds=expires_in_seconds,
        )
        req = self._req("POST", "/requests", json_body=payload, has_json=True)
        if idempotency_key is not None:
            req.headers["idempotency-key"] = idempotency_key
        doc = yield from call_json(
            req, self._policy, expect=(200, 201), retry_failures=idempotency_key is not None
        )
        return PersonRequest.from_json(_unwrap(doc, "request"))

    def _op_request(self, request_id: str, wait: float = 0.0) -> Op[PersonRequest]:
        params = {"wait": _num(min(wait, MAX_WAIT))} if wait > 0 else None
        req = self._req(
            "GET", f"/requests/{_seg(request_id)}", params=params, timeout=self._timeout + wait
        )
        doc = yield from call_json(req, self._policy, retry_failures=True)
        return PersonRequest.from_json(_unwrap(doc, "request"))

    def _op_wait_for_answer(self, request_id: str, timeout: float | None) -> Op[PersonRequest]:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = RECONNECT_FIRST
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            wait = MAX_WAIT if left is None else max(0.0, min(MAX_WAIT, left))
            try:
                found = yield from self._op_request(request_id, wait)
                pause = RECONNECT_FIRST
            except AgentAddressError as e:
                if e.code not in ("unreachable", "unavailable", "rate_limited"):
                    raise
                found = None
                sleep = e.retry_after if e.retry_after is not None else pause
                pause = min(pause * 2, RECONNECT_MAX)
                yield Sleep(sleep)
            if found is not None and found.status != "open":
                return found
            if deadline is not None and time.monotonic() >= deadline:
                raise AgentAddressError(
                    f"request {request_id} was not answered within {timeout} s",
                    code="timed_out",
                )

    # --- wake hooks ---

    def _op_add_hook(
        self,
        url: str,
        types: Sequence[str] | None,
        format: str | None,
        headers: dict[str, str] | None,
        debounce_seconds: int | None,
    ) -> Op[tuple[Hook, str]]:
        payload = body(
            "HookRequest",
            url=url,
            types=list(types) if types is not None else None,
            format=format,
            headers=headers,
            debounce_seconds=debounce_seconds,
        )
        req = self._req("POST", "/hooks", json_body=payload, has_json=True)
        doc = yield from call_json(req, self._policy, expect=(201,))
        made = HookCreated.from_json(doc)
        return (made.hook, made.signing_secret)

    def _op_hooks(self) -> Op[list[Hook]]:
        doc = yield from call_json(self._req("GET", "/hooks"), self._policy, retry_failures=True)
        return [Hook.from_json(h) for h in _list(_unwrap(doc, "hooks"))]

    def _op_set_hook_status(self, hook_id: str, status: str) -> Op[Hook]:
        req = self._req(
            "PUT",
            f"/hooks/{_seg(hook_id)}",
            json_body=body("HookStatusBody", status=status),
            has_json=True,
        )
        doc = yield from call_json(req, self._policy, retry_failures=True)
        return Hook.from_json(_unwrap(doc, "hook"))

    def _op_remove_hook(self, hook_id: str) -> Op[None]:
        req = self._req("DELETE", f"/hooks/{_seg(hook_id)}")
        yield from call(req, self._policy, expect=(204,), retry_failures=True)
        return None

    # --- timers ---

    def _op_set_timer(
        self,
        in_seconds: int | None,
        fire_at: str | None,
        type: str | None,
        data: Any,
        idempotency_key: str | None,
    ) -> Op[Timer]:
        if (in_seconds is None) == (fire_at is None):
            raise ValueError("give exactly one of in_seconds and fire_at")
        payload = body("TimerRequest", in_seconds=in_seconds, fire_at=fire_at, type=type, data=data)
        req = self._req("POST", "/timers", json_body=payload, has_json=True)
        if idempotency_key is not None:
            req.headers["idempotency-key"] = idempotency_key
        doc = yield from call_json(
            req, self._policy, expect=(200, 201), retry_failures=idempotency_key is not None
        )
        return Timer.from_json(_unwrap(doc, "timer"))

    def _op_timers(self) -> Op[list[Timer]]:
        doc = yield from call_json(self._req("GET", "/timers"), self._policy, retry_failures=True)
        return [Timer.from_json(t) for t in _list(_unwrap(doc, "timers"))]

    def _op_cancel_timer(self, timer_id: str) -> Op[Timer]:
        req = self._req("DELETE", f"/timers/{_seg(timer_id)}")
        doc = yield from call_json(req, self._policy, retry_failures=True)
        return Timer.from_json(_unwrap(doc, "timer"))

    # --- attachments, the address ---

    def _op_download(self, path_in_root: str, dest: Path) -> Op[Path]:
        req = self._req("GET", path_in_root, stream_to=dest, timeout=max(self._timeout, 300.0))
        req.headers["accept"] = "*/*"
        resp = yield from call(req, self._policy, expect=(200, 303), retry_failures=True)
        if resp.status == 303:
            # A presigned link (AWS, over 4 MiB): followed WITHOUT the bearer token.
            location = resp.headers.get("location")
            if not location or not location.startswith(("https://", "http://")):
                raise AgentAddressError("a 303 without a usable Location", code="bad_response")
            follow = Req("GET", location, stream_to=dest, timeout=max(self._timeout, 300.0))
            follow.headers["accept"] = "*/*"
            yield from call(follow, self._policy, expect=(200,), retry_failures=True)
        return dest

    def _op_inspect(self) -> Op[dict[str, Any]]:
        doc = yield from call_json(self._req("GET", ""), self._policy, retry_failures=True)
        if not isinstance(doc, dict):
            raise AgentAddressError("unexpected answer: not an object", code="bad_response")
        return doc

    def _op_delete(self) -> Op[None]:
        yield from call(self._req("DELETE", ""), self._policy, expect=(204,), retry_failures=True)
        return None


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise AgentAddressError("unexpected answer: not a list", code="bad_response")
    return value


def _address_kwargs(client: _ClientBase, saved: dict[str, Any]) -> dict[str, Any]:
    secrets = saved.get("hook_secrets")
    cursor = saved.get("cursor")
    return {
        "base_url": saved.get("_request_base", client.base_url),
        "id": saved["address_id"],
        "read_token": saved["read_token"],
        "policy": client.policy,
        "timeout": client.timeout,
        "email": saved.get("email") or None,
        "inbox_url": saved.get("inbox_url") or None,
        "name": saved.get("name"),
        "task_id": saved.get("task"),
        "created_at": saved.get("created_at"),
        "expires_at": saved.get("expires_at"),
        "task": saved["task"],
        "cursor": cursor if isinstance(cursor, int) else 0,
        "hook_secrets": secrets if isinstance(secrets, dict) else None,
        "saved_base_url": saved.get("base_url"),
        "extra": {k: v for k, v in saved.items() if k not in creds.KNOWN and not k.startswith("_")},
    }


def _created_kwargs(client: _ClientBase, made: CreatedAddress) -> dict[str, Any]:
    secrets = {}
    for h in made.hooks or []:
        hc = HookCreated.from_json(h)
        secrets[hc.hook.id] = hc.signing_secret
    a = made.address
    return {
        "base_url": client.base_url,
        "id": a.id,
        "read_token": made.credentials.read_token,
        "policy": client.policy,
        "timeout": client.timeout,
        "email": a.email,
        "inbox_url": made.endpoints.inbox_url,
        "name": a.name,
        "task_id": a.task_id,
        "created_at": a.created_at,
        "expires_at": a.expires_at,
        "hook_secrets": secrets,
    }


# ---------------------------------------------------------------------------------------------
# Synchronous


class Client(_ClientBase):
    """The synchronous client. ``base_url``: the server (without ``/api/v1``), else
    ``$AGENTADDRESS_URL``, else ``http://127.0.0.1:8080``."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        timeout: float = 35.0,
        max_retries: int = 4,
        max_retry_wait: float = 60.0,
    ) -> None:
        super().__init__(
            base_url, timeout=timeout, max_retries=max_retries, max_retry_wait=max_retry_wait
        )
        self._http = httpx.Client(follow_redirects=False, trust_env=True)

    def _run(self, op: Op[Any]) -> Any:
        return run_sync(self._http, op)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def create_address(
        self,
        *,
        name: str | None = None,
        task_id: str | None = None,
        expires_in_seconds: int | None = None,
        verification: dict[str, Any] | None = None,
        hooks: Sequence[dict[str, Any]] | None = None,
    ) -> Address:
        """``POST /api/v1/addresses`` (docs/API.md §1). ``hooks``: wake hooks made with it
        (``{"url", "types"?, "format"?, "headers"?, "debounce_seconds"?}``, §19); their signing
        secrets are on ``address.hook_secrets``."""
        made: CreatedAddress = self._run(
            self._op_create(name, task_id, expires_in_seconds, verification, hooks)
        )
        return Address(self, **_created_kwargs(self, made))

    def address(self, id: str, read_token: str) -> Address:
        """A handle on an existing address (no request is sent)."""
        return Address(
            self,
            base_url=self.base_url,
            id=id,
            read_token=read_token,
            policy=self.policy,
            timeout=self.timeout,
        )

    def load(self, task: str) -> Address:
        """The address saved for ``task`` in the CLI's credentials directory (docs/CLI.md)."""
        return Address(self, **_address_kwargs(self, self._loaded(task)))

    def deliver(
        self,
        inbox_url: str,
        body: Any,
        idempotency_key: str | None = None,
        *,
        content_type: str | None = None,
    ) -> Delivery:
        """POSTs ``body`` to an inbox URL (docs/API.md §3): JSON for any value, ``bytes`` and
        ``str`` as they are."""
        result: Delivery = self._run(
            self._op_deliver(inbox_url, body, idempotency_key, content_type)
        )
        return result


class State:
    """``address.state``: small JSON values with revisions (docs/API.md §7)."""

    def __init__(self, address: Address) -> None:
        self._a = address

    def get(self, key: str) -> tuple[Any, int | None]:
        """``(value, revision)``; ``(None, None)`` when the key does not exist."""
        result: tuple[Any, int | None] = self._a._run(self._a._op_state_get(key))
        return result

    def put(self, key: str, value: Any, if_revision: int | None = None) -> int:
        """Writes ``value``; ``if_revision`` 0 = only if absent, N = only at revision N
        (else :class:`RevisionConflict`). Returns the new revision."""
        w: StateWrite = self._a._run(self._a._op_state_put(key, value, if_revision))
        return w.revision

    def delete(self, key: str, if_revision: int | None = None) -> int:
        """Deletes the key; returns the revision of its ``state.deleted`` event."""
        d: StateDelete = self._a._run(self._a._op_state_delete(key, if_revision))
        return d.revision

    def update(self, key: str, fn: Callable[[Any], Any], retries: int = 5) -> tuple[Any, int]:
        """Compare-and-set loop: ``fn(current value or None)`` is written at the revision read;
        on a conflict it is read and applied again (``retries`` times). ``(value, revision)``."""
        result: tuple[Any, int] = self._a._run(self._a._op_state_update(key, fn, retries))
        return result

    def keys(self) -> StateList:
        result: StateList = self._a._run(self._a._op_state_keys())
        return result


class Address(_AddressCore):
    """An address: read its feed, ack, state, ask a person, hooks, timers."""

    def __init__(self, client: Client, **kw: Any) -> None:
        super().__init__(**kw)
        self._client = client
        self.state = State(self)

    def _run(self, op: Op[Any]) -> Any:
        return self._client._run(op)

    def poll(
        self,
        after: int | None = None,
        wait: float = 0,
        types: str | Sequence[str] | None = None,
        *,
        limit: int | None = None,
    ) -> Page:
        """One read of the feed (docs/API.md §4, §21): events after ``after`` (default: the saved
        cursor), waiting up to ``wait`` seconds (≤ 25) for one."""
        page: Page = self._run(self._op_poll(after, wait, types, limit))
        return page

    def events(
        self,
        after: int | None = None,
        wait: float = 25,
        types: str | Sequence[str] | None = None,
        timeout: float | None = None,
        *,
        limit: int | None = None,
    ) -> Iterator[Event]:
        """Every event after ``after`` (default: the saved cursor), in order, forever: long
        polls with the cursor kept; a dropped connection or a server restart is reconnected
        with backoff from the same cursor. With ``timeout``, the iteration ends once no event
        came for that many seconds."""
        cursor = self.cursor if after is None else after
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            page: Page = self._run(self._op_next_page(cursor, wait, types, limit, deadline))
            for event in page.events:
                cursor = event.sequence
                yield event
            cursor = max(cursor, page.next_cursor)
            if page.events and timeout is not None:
                deadline = time.monotonic() + timeout
            elif deadline is not None and time.monotonic() >= deadline and not page.has_more:
                return

    def event(self, event_id: str) -> Event:
        result: Event = self._run(self._op_event(event_id))
        return result

    def ack(self, event_id: str) -> Acked:
        """Acknowledges the event (docs/API.md §5). A handle bound to a task (loaded or saved)
        also moves the task's saved cursor, as the CLI's ``ack`` does."""
        acked: Acked = self._run(self._op_ack(event_id))
        self._after_ack(acked)
        return acked

    def ask(
        self,
        title: str,
        body: str | None = None,
        options: Sequence[str] | None = None,
        expires_in_seconds: int | None = None,
        *,
        comment: str | None = None,
        idempotency_key: str | None = None,
    ) -> PersonRequest:
        """Asks a person (docs/API.md §12): hand ``request.url`` to them."""
        result: PersonRequest = self._run(
            self._op_ask(title, body, options, expires_in_seconds, comment, idempotency_key)
        )
        return result

    def request(self, request_id: str) -> PersonRequest:
        result: PersonRequest = self._run(self._op_request(request_id))
        return result

    def wait_for_answer(self, request_id: str, timeout: float | None = None) -> PersonRequest:
        """Waits until the request is answered or expired (then returns it), or raises
        ``timed_out`` after ``timeout`` seconds."""
        result: PersonRequest = self._run(self._op_wait_for_answer(request_id, timeout))
        return result

    def add_hook(
        self,
        url: str,
        types: Sequence[str] | None = None,
        format: str | None = None,
        headers: dict[str, str] | None = None,
        *,
        debounce_seconds: int | None = None,
    ) -> tuple[Hook, str]:
        """Adds a wake hook (docs/API.md §19): ``(hook, signing_secret)``; verify its wakes with
        :func:`verify_wake`."""
        hook, secret = self._run(self._op_add_hook(url, types, format, headers, debounce_seconds))
        self._after_hook(hook, secret)
        return hook, secret

    def hooks(self) -> list[Hook]:
        result: list[Hook] = self._run(self._op_hooks())
        return result

    def set_hook_status(self, hook_id: str, status: str) -> Hook:
        result: Hook = self._run(self._op_set_hook_status(hook_id, status))
        return result

    def remove_hook(self, hook_id: str) -> None:
        self._run(self._op_remove_hook(hook_id))

    def set_timer(
        self,
        in_seconds: int | None = None,
        *,
        fire_at: str | None = None,
        type: str | None = None,
        data: Any = None,
        idempotency_key: str | None = None,
    ) -> Timer:
        """A timer (docs/API.md §20): one event of ``type`` (``timer.fired``) at its time."""
        result: Timer = self._run(
            self._op_set_timer(in_seconds, fire_at, type, data, idempotency_key)
        )
        return result

    def timers(self) -> list[Timer]:
        result: list[Timer] = self._run(self._op_timers())
        return result

    def cancel_timer(self, timer_id: str) -> Timer:
        result: Timer = self._run(self._op_cancel_timer(timer_id))
        return result

    def download_attachment(
        self, event_id: str, attachment_id: str, path: str | os.PathLike[str]
    ) -> Path:
        """Streams an email attachment (docs/API.md §11) into a new file ``path``."""
        result: Path = self._run(
            self._op_download(
                f"/events/{_seg(event_id)}/attachments/{_seg(attachment_id)}", Path(path)
            )
        )
        return result

    def download_raw(self, event_id: str, path: str | os.PathLike[str]) -> Path:
        """Streams an email event's raw message into a new file ``path``."""
        result: Path = self._run(self._op_download(f"/events/{_seg(event_id)}/raw", Path(path)))
        return result

    def inspect(self) -> dict[str, Any]:
        """``GET {root}``: the address, usage and limits (docs/API.md §2)."""
        result: dict[str, Any] = self._run(self._op_inspect())
        return result

    def delete(self) -> None:
        self._run(self._op_delete())

    def deliver(self, body: Any, idempotency_key: str | None = None) -> Delivery:
        """Delivers to this address's own inbox URL (known after create or load)."""
        if self.inbox_url is None:
            raise AgentAddressError("this handle does not know its inbox URL", code="usage")
        return self._client.deliver(self.inbox_url, body, idempotency_key)


# ---------------------------------------------------------------------------------------------
# Asynchronous: the same operations, driven by asyncio.


class AsyncClient(_ClientBase):
    """The asynchronous client: :class:`Client`'s methods as coroutines."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        timeout: float = 35.0,
        max_retries: int = 4,
        max_retry_wait: float = 60.0,
    ) -> None:
        super().__init__(
            base_url, timeout=timeout, max_retries=max_retries, max_retry_wait=max_retry_wait
        )
        self._http = httpx.AsyncClient(follow_redirects=False, trust_env=True)

    async def _run(self, op: Op[Any]) -> Any:
        return await run_async(self._http, op)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def create_address(
        self,
        *,
        name: str | None = None,
        task_id: str | None = None,
        expires_in_seconds: int | None = None,
        verification: dict[str, Any] | None = None,
        hooks: Sequence[dict[str, Any]] | None = None,
    ) -> AsyncAddress:
        made: CreatedAddress = await self._run(
            self._op_create(name, task_id, expires_in_seconds, verification, hooks)
        )
        return AsyncAddress(self, **_created_kwargs(self, made))

    def address(self, id: str, read_token: str) -> AsyncAddress:
        return AsyncAddress(
            self,
            base_url=self.base_url,
            id=id,
            read_token=read_token,
            policy=self.policy,
            timeout=self.timeout,
        )

    def load(self, task: str) -> AsyncAddress:
        return AsyncAddress(self, **_address_kwargs(self, self._loaded(task)))

    async def deliver(
        self,
        inbox_url: str,
        body: Any,
        idempotency_key: str | None = None,
        *,
        content_type: str | None = None,
    ) -> Delivery:
        result: Delivery = await self._run(
            self._op_deliver(inbox_url, body, idempotency_key, content_type)
        )
        return result


class AsyncState:
    """``address.state`` of an :class:`AsyncAddress`."""

    def __init__(self, address: AsyncAddress) -> None:
        self._a = address

    async def get(self, key: str) -> tuple[Any, int | None]:
        result: tuple[Any, int | None] = await self._a._run(self._a._op_state_get(key))
        return result

    async def put(self, key: str, value: Any, if_revision: int | None = None) -> int:
        w: StateWrite = await self._a._run(self._a._op_state_put(key, value, if_revision))
        return w.revision

    async def delete(self, key: str, if_revision: int | None = None) -> int:
        d: StateDelete = await self._a._run(self._a._op_state_delete(key, if_revision))
        return d.revision

    async def update(self, key: str, fn: Callable[[Any], Any], retries: int = 5) -> tuple[Any, int]:
        result: tuple[Any, int] = await self._a._run(self._a._op_state_update(key, fn, retries))
        return result

    async def keys(self) -> StateList:
        result: StateList = await self._a._run(self._a._op_state_keys())
        return result


class AsyncAddress(_AddressCore):
    """:class:`Address` with coroutines (and ``events`` as an async iterator)."""

    def __init__(self, client: AsyncClient, **kw: Any) -> None:
        super().__init__(**kw)
        self._client = client
        self.state = AsyncState(self)

    async def _run(self, op: Op[Any]) -> Any:
        return await self._client._run(op)

    async def poll(
        self,
        after: int | None = None,
        wait: float = 0,
        types: str | Sequence[str] | None = None,
        *,
        limit: int | None = None,
    ) -> Page:
        page: Page = await self._run(self._op_poll(after, wait, types, limit))
        return page

    async def events(
        self,
        after: int | None = None,
        wait: float = 25,
        types: str | Sequence[str] | None = None,
        timeout: float | None = None,
        *,
        limit: int | None = None,
    ) -> AsyncIterator[Event]:
        cursor = self.cursor if after is None else after
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            page: Page = await self._run(self._op_next_page(cursor, wait, types, limit, deadline))
            for event in page.events:
                cursor = event.sequence
                yield event
            cursor = max(cursor, page.next_cursor)
            if page.events and timeout is not None:
                deadline = time.monotonic() + timeout
            elif deadline is not None and time.monotonic() >= deadline and not page.has_more:
                return

    async def event(self, event_id: str) -> Event:
        result: Event = await self._run(self._op_event(event_id))
        return result

    async def ack(self, event_id: str) -> Acked:
        acked: Acked = await self._run(self._op_ack(event_id))
        self._after_ack(acked)
        return acked

    async def ask(
        self,
        title: str,
        body: str | None = None,
        options: Sequence[str] | None = None,
        expires_in_seconds: int | None = None,
        *,
        comment: str | None = None,
        idempotency_key: str | None = None,
    ) -> PersonRequest:
        result: PersonRequest = await self._run(
            self._op_ask(title, body, options, expires_in_seconds, comment, idempotency_key)
        )
        return result

    async def request(self, request_id: str) -> PersonRequest:
        result: PersonRequest = await self._run(self._op_request(request_id))
        return result

    async def wait_for_answer(self, request_id: str, timeout: float | None = None) -> PersonRequest:
        result: PersonRequest = await self._run(self._op_wait_for_answer(request_id, timeout))
        return result

    async def add_hook(
        self,
        url: str,
        types: Sequence[str] | None = None,
        format: str | None = None,
        headers: dict[str, str] | None = None,
        *,
        debounce_seconds: int | None = None,
    ) -> tuple[Hook, str]:
        hook, secret = await self._run(
            self._op_add_hook(url, types, format, headers, debounce_seconds)
        )
        self._after_hook(hook, secret)
        return hook, secret

    async def hooks(self) -> list[Hook]:
        result: list[Hook] = await self._run(self._op_hooks())
        return result

    async def set_hook_status(self, hook_id: str, status: str) -> Hook:
        result: Hook = await self._run(self._op_set_hook_status(hook_id, status))
        return result

    async def remove_hook(self, hook_id: str) -> None:
        await self._run(self._op_remove_hook(hook_id))

    async def set_timer(
        self,
        in_seconds: int | None = None,
        *,
        fire_at: str | None = None,
        type: str | None = None,
        data: Any = None,
        idempotency_key: str | None = None,
    ) -> Timer:
        result: Timer = await self._run(
            self._op_set_timer(in_seconds, fire_at, type, data, idempotency_key)
        )
        return result

    async def timers(self) -> list[Timer]:
        result: list[Timer] = await self._run(self._op_timers())
        return result

    async def cancel_timer(self, timer_id: str) -> Timer:
        result: Timer = await self._run(self._op_cancel_timer(timer_id))
        return result

    async def download_attachment(
        self, event_id: str, attachment_id: str, path: str | os.PathLike[str]
    ) -> Path:
        result: Path = await self._run(
            self._op_download(
                f"/events/{_seg(event_id)}/attachments/{_seg(attachment_id)}", Path(path)
            )
        )
        return result

    async def download_raw(self, event_id: str, path: str | os.PathLike[str]) -> Path:
        result: Path = await self._run(
            self._op_download(f"/events/{_seg(event_id)}/raw", Path(path))
        )
        return result

    async def inspect(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._run(self._op_inspect())
        return result

    async def delete(self) -> None:
        await self._run(self._op_delete())

    async def deliver(self, body: Any, idempotency_key: str | None = None) -> Delivery:
        if self.inbox_url is None:
            raise AgentAddressError("this handle does not know its inbox URL", code="usage")
        return await self._client.deliver(self.inbox_url, body, idempotency_key)


__all__ = [
    "Address",
    "AsyncAddress",
    "AsyncClient",
    "AsyncState",
    "Client",
    "State",
]
