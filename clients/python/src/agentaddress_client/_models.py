"""The API's objects as dataclasses.

Each model names the component of ``/openapi.json`` it is read from (``SCHEMA``), and each of
its fields the property it comes from and the JSON type the client expects (``wire`` metadata:
``string``, ``integer``, ``boolean``, ``array``, ``object``, ``any``, or ``ref:Component``; a
trailing ``?`` means the property may be absent or ``null``). Parsing reads exactly these
declarations, and a test checks them against the running server's ``/openapi.json``: a renamed
field breaks the build, not a user. Every model keeps the whole object it was read from on
``.raw``, so unknown fields (and events of unknown types) are never lost.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from ._errors import AgentAddressError

T = TypeVar("T", bound="Model")


def wire(name: str, kind: str, **kw: Any) -> Any:
    """A field read from the JSON property ``name``, of the wire type ``kind``."""
    optional = kind.endswith("?")
    if optional and "default" not in kw and "default_factory" not in kw:
        kw["default"] = None
    return field(metadata={"json": name, "kind": kind}, **kw)


def _bad(what: str) -> AgentAddressError:
    return AgentAddressError(f"unexpected answer: {what}", code="bad_response")


def _check(kind: str, value: Any) -> bool:
    if kind == "any":
        return True
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object" or kind.startswith("ref:"):
        return isinstance(value, dict)
    raise ValueError(f"unknown wire kind {kind}")


@dataclass(kw_only=True)
class Model:
    """Base of the models: ``raw`` is the JSON object as the server sent it."""

    SCHEMA: ClassVar[str] = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False, kw_only=True)

    @classmethod
    def from_json(cls: type[T], raw: Any) -> T:
        if not isinstance(raw, dict):
            raise _bad(f"{cls.SCHEMA} is not an object")
        kwargs: dict[str, Any] = {"raw": raw}
        for f in dataclasses.fields(cls):
            name = f.metadata.get("json")
            if name is None:
                continue
            kind: str = f.metadata["kind"]
            optional = kind.endswith("?")
            base = kind.rstrip("?")
            value = raw.get(name)
            if value is None:
                if not optional and not (base == "any" and name in raw):
                    raise _bad(f"{cls.SCHEMA}.{name} is missing")
                kwargs[f.name] = None
                continue
            if not _check(base, value):
                raise _bad(f"{cls.SCHEMA}.{name} is not {base}")
            if base.startswith("ref:"):
                value = MODELS[base[4:]].from_json(value)
            kwargs[f.name] = value
        return cls(**kwargs)


@dataclass(kw_only=True)
class Event(Model):
    """A feed event (docs/API.md §4). An unknown ``type`` or extra fields are kept (``raw``)."""

    SCHEMA: ClassVar[str] = "EventView"
    id: str = wire("id", "string")
    sequence: int = wire("sequence", "integer")
    type: str = wire("type", "string")
    source: str | None = wire("source", "string?")
    ingress_surface: str = wire("ingress_surface", "string")
    received_at: str = wire("received_at", "string")
    acknowledged_at: str | None = wire("acknowledged_at", "string?")
    data: Any = wire("data", "any")
    http: dict[str, Any] | None = wire("http", "object?")
    verification: dict[str, Any] | None = wire("verification", "object?")


@dataclass(kw_only=True)
class Page(Model):
    """One read of the feed: ``events``, ``next_cursor`` (pass as ``after``), ``has_more``."""

    SCHEMA: ClassVar[str] = "EventPageView"
    events: list[Event] = wire("events", "array")
    next_cursor: int = wire("next_cursor", "integer")
    has_more: bool = wire("has_more", "boolean")

    def __post_init__(self) -> None:
        self.events = [e if isinstance(e, Event) else Event.from_json(e) for e in self.events]


@dataclass(kw_only=True)
class EventRef(Model):
    """The id and sequence of an event another operation appended."""

    SCHEMA: ClassVar[str] = "EventRefView"
    id: str = wire("id", "string")
    sequence: int = wire("sequence", "integer")


@dataclass(kw_only=True)
class Delivery(Model):
    """The answer to a delivery to an inbox URL (docs/API.md §3)."""

    SCHEMA: ClassVar[str] = "DeliveryResult"
    duplicate: bool = wire("duplicate", "boolean")
    event: EventRef = wire("event", "ref:EventRefView")


@dataclass(kw_only=True)
class Acked(Model):
    """The answer to an acknowledgement (docs/API.md §5)."""

    SCHEMA: ClassVar[str] = "AckedEventView"
    id: str = wire("id", "string")
    sequence: int = wire("sequence", "integer")
    acknowledged_at: str = wire("acknowledged_at", "string")


@dataclass(kw_only=True)
class StateValue(Model):
    """``GET {state_url}/{key}`` (docs/API.md §7)."""

    SCHEMA: ClassVar[str] = "StateValue"
    key: str = wire("key", "string")
    value: Any = wire("value", "any")
    revision: int = wire("revision", "integer")
    updated_at: str = wire("updated_at", "string")


@dataclass(kw_only=True)
class StateWrite(Model):
    """The answer to ``PUT {state_url}/{key}``."""

    SCHEMA: ClassVar[str] = "StateWriteResult"
    key: str = wire("key", "string")
    value: Any = wire("value", "any")
    revision: int = wire("revision", "integer")
    updated_at: str = wire("updated_at", "string")
    event: EventRef = wire("event", "ref:EventRefView")


@dataclass(kw_only=True)
class StateDelete(Model):
    """The answer to ``DELETE {state_url}/{key}``."""

    SCHEMA: ClassVar[str] = "StateDeleteResult"
    key: str = wire("key", "string")
    deleted: bool = wire("deleted", "boolean")
    revision: int = wire("revision", "integer")
    event: EventRef = wire("event", "ref:EventRefView")


@dataclass(kw_only=True)
class StateKey(Model):
    """One key of ``GET {state_url}``."""

    SCHEMA: ClassVar[str] = "StateKeyView"
    key: str = wire("key", "string")
    revision: int = wire("revision", "integer")
    size: int = wire("size", "integer")
    updated_at: str = wire("updated_at", "string")


@dataclass(kw_only=True)
class StateList(Model):
    """``GET {state_url}``: every key with its revision and size."""

    SCHEMA: ClassVar[str] = "StateList"
    keys: list[StateKey] = wire("keys", "array")
    state_bytes: int = wire("state_bytes", "integer")
    state_keys: int = wire("state_keys", "integer")

    def __post_init__(self) -> None:
        self.keys = [k if isinstance(k, StateKey) else StateKey.from_json(k) for k in self.keys]


@dataclass(kw_only=True)
class Answer(Model):
    """A person's answer to a request (docs/API.md §12)."""

    SCHEMA: ClassVar[str] = "AnswerView"
    choice: str = wire("choice", "string")
    comment: str | None = wire("comment", "string?")
    answered_at: str = wire("answered_at", "string")


@dataclass(kw_only=True)
class PersonRequest(Model):
    """A request for a person (docs/API.md §12). ``url`` is the person's page: only in the
    creation's answer (``None`` when read back)."""

    SCHEMA: ClassVar[str] = "RequestView"
    id: str = wire("id", "string")
    url: str | None = wire("url", "string?", repr=False)
    title: str = wire("title", "string")
    body: str | None = wire("body", "string?")
    options: list[str] = wire("options", "array")
    comment: str = wire("comment", "string")
    status: str = wire("status", "string")
    created_at: str = wire("created_at", "string")
    expires_at: str = wire("expires_at", "string")
    answer: Answer | None = wire("answer", "ref:AnswerView?")


@dataclass(kw_only=True)
class Hook(Model):
    """A wake hook (docs/API.md §19): never its secret or its headers' values."""

    SCHEMA: ClassVar[str] = "HookView"
    id: str = wire("id", "string")
    url: str = wire("url", "string")
    types: list[str] = wire("types", "array")
    format: str = wire("format", "string")
    header_names: list[str] = wire("header_names", "array")
    debounce_seconds: int = wire("debounce_seconds", "integer")
    status: str = wire("status", "string")
    delivered_through: int = wire("delivered_through", "integer")
    created_at: str = wire("created_at", "string")
    last_wake_at: str | None = wire("last_wake_at", "string?")
    last_error: str | None = wire("last_error", "string?")


@dataclass(kw_only=True)
class Timer(Model):
    """A timer (docs/API.md §20)."""

    SCHEMA: ClassVar[str] = "TimerView"
    id: str = wire("id", "string")
    type: str = wire("type", "string")
    fire_at: str = wire("fire_at", "string")
    status: str = wire("status", "string")
    # Any JSON (docs/API.md §20), though /openapi.json says an object: the server takes and
    # answers any value, so the client reads any.
    data: Any = wire("data", "any?")
    created_at: str = wire("created_at", "string")
    closed_at: str | None = wire("closed_at", "string?")
    event_id: str | None = wire("event_id", "string?")
    sequence: int | None = wire("sequence", "integer?")


@dataclass(kw_only=True)
class AddressInfo(Model):
    """The public view of an address (``address`` of docs/API.md §1–§2)."""

    SCHEMA: ClassVar[str] = "AddressView"
    id: str = wire("id", "string")
    name: str | None = wire("name", "string?")
    task_id: str | None = wire("task_id", "string?")
    email: str = wire("email", "string")
    created_at: str = wire("created_at", "string")
    expires_at: str | None = wire("expires_at", "string?")


@dataclass(kw_only=True)
class Endpoints(Model):
    """``endpoints`` of the creation's answer."""

    SCHEMA: ClassVar[str] = "Endpoints"
    inbox_url: str = wire("inbox_url", "string", repr=False)
    events_url: str = wire("events_url", "string")
    state_url: str = wire("state_url", "string")


@dataclass(kw_only=True)
class IssuedCredentials(Model):
    """``credentials`` of the creation's answer (the read token, shown once)."""

    SCHEMA: ClassVar[str] = "Credentials"
    read_token: str = wire("read_token", "string", repr=False)


@dataclass(kw_only=True)
class HookCreated(Model):
    """A hook as made, with its signing secret (shown once)."""

    SCHEMA: ClassVar[str] = "HookCreated"
    hook: Hook = wire("hook", "ref:HookView")
    signing_secret: str = wire("signing_secret", "string", repr=False)


@dataclass(kw_only=True)
class CreatedAddress(Model):
    """The answer to ``POST /api/v1/addresses``."""

    SCHEMA: ClassVar[str] = "CreatedAddress"
    address: AddressInfo = wire("address", "ref:AddressView")
    credentials: IssuedCredentials = wire("credentials", "ref:Credentials", repr=False)
    endpoints: Endpoints = wire("endpoints", "ref:Endpoints")
    hooks: list[Any] | None = wire("hooks", "array?")


@dataclass(kw_only=True)
class ErrorDetail(Model):
    """The error object (docs/API.md §0); read by the error path (``_errors.from_answer``)."""

    SCHEMA: ClassVar[str] = "ErrorDetail"
    code: str = wire("code", "string")
    message: str = wire("message", "string")
    current_revision: int | None = wire("current_revision", "integer?")
    retry_after_seconds: int | None = wire("retry_after_seconds", "integer?")


MODELS: dict[str, type[Model]] = {
    m.SCHEMA: m
    for m in (
        Event,
        Page,
        EventRef,
        Delivery,
        Acked,
        StateValue,
        StateWrite,
        StateDelete,
        StateKey,
        StateList,
        Answer,
        PersonRequest,
        Hook,
        Timer,
        AddressInfo,
        Endpoints,
        IssuedCredentials,
        HookCreated,
        CreatedAddress,
        ErrorDetail,
    )
}

# The envelopes the client unwraps: an answer of component C holds the model under this key.
ENVELOPES: dict[str, tuple[str, str]] = {
    "SingleEvent": ("event", "EventView"),
    "AckResult": ("event", "AckedEventView"),
    "RequestEnvelope": ("request", "RequestView"),
    "HooksEnvelope": ("hooks", "HookView"),
    "HookEnvelope": ("hook", "HookView"),
    "TimerEnvelope": ("timer", "TimerView"),
    "TimersEnvelope": ("timers", "TimerView"),
    "ErrorBody": ("error", "ErrorDetail"),
}

# What the client sends: for each request body component, the fields it may send, and those it
# always sends (the test checks the schema's required fields are among them).
SENDS: dict[str, dict[str, frozenset[str]]] = {
    "CreateAddressRequest": {
        "may": frozenset({"name", "task_id", "expires_in_seconds", "verification", "hooks"}),
        "always": frozenset(),
    },
    "PutStateRequest": {"may": frozenset({"value", "if_revision"}), "always": frozenset({"value"})},
    "CreateRequestBody": {
        "may": frozenset({"title", "body", "options", "comment", "expires_in_seconds"}),
        "always": frozenset({"title"}),
    },
    "HookRequest": {
        "may": frozenset({"url", "types", "format", "headers", "debounce_seconds"}),
        "always": frozenset({"url"}),
    },
    "HookStatusBody": {"may": frozenset({"status"}), "always": frozenset({"status"})},
    "TimerRequest": {
        "may": frozenset({"fire_at", "in_seconds", "type", "data"}),
        "always": frozenset(),
    },
}


def body(component: str, **fields: Any) -> dict[str, Any]:
    """A request body of ``component``, leaving out ``None`` fields; only declared fields."""
    spec = SENDS[component]
    out: dict[str, Any] = {}
    for name, value in fields.items():
        if name not in spec["may"]:
            raise ValueError(f"{component}.{name} is not a field the client declares")
        if value is not None or name in spec["always"]:
            out[name] = value
    missing = spec["always"] - out.keys()
    if missing:
        raise ValueError(f"{component} needs {sorted(missing)}")
    return out


_A = "/api/v1/addresses/{address_id}"

# Every route the client calls: (method, path, request body component, {status: answer
# component}). Checked against /openapi.json by the tests.
OPERATIONS: list[tuple[str, str, str | None, dict[int, str | None]]] = [
    ("POST", "/api/v1/addresses", "CreateAddressRequest", {201: "CreatedAddress"}),
    ("GET", _A, None, {200: "AddressDetails"}),
    ("DELETE", _A, None, {204: None}),
    ("POST", "/api/v1/inbox/{address_id}/{inbox_secret}", None, {202: "DeliveryResult"}),
    ("GET", _A + "/events", None, {200: "EventPageView"}),
    ("GET", _A + "/events/{event_id}", None, {200: "SingleEvent"}),
    ("POST", _A + "/events/{event_id}/ack", None, {200: "AckResult"}),
    ("GET", _A + "/events/{event_id}/attachments/{attachment_id}", None, {200: None}),
    ("GET", _A + "/events/{event_id}/raw", None, {200: None}),
    ("GET", _A + "/state", None, {200: "StateList"}),
    ("GET", _A + "/state/{key}", None, {200: "StateValue"}),
    ("PUT", _A + "/state/{key}", "PutStateRequest", {200: "StateWriteResult"}),
    ("DELETE", _A + "/state/{key}", None, {200: "StateDeleteResult"}),
    ("POST", _A + "/requests", "CreateRequestBody", {201: "RequestEnvelope"}),
    ("GET", _A + "/requests/{request_id}", None, {200: "RequestEnvelope"}),
    ("POST", _A + "/hooks", "HookRequest", {201: "HookCreated"}),
    ("GET", _A + "/hooks", None, {200: "HooksEnvelope"}),
    ("PUT", _A + "/hooks/{hook_id}", "HookStatusBody", {200: "HookEnvelope"}),
    ("DELETE", _A + "/hooks/{hook_id}", None, {204: None}),
    ("POST", _A + "/timers", "TimerRequest", {201: "TimerEnvelope"}),
    ("GET", _A + "/timers", None, {200: "TimersEnvelope"}),
    ("DELETE", _A + "/timers/{timer_id}", None, {200: "TimerEnvelope"}),
]
