"""LangGraph: ask a person from inside a graph; the graph resumes with the answer from the feed
(``pip install 'agentaddress-client[langgraph]'``).

    from agentaddress_client.langgraph import ask_person, run

    def approve(state):
        answer = ask_person(address, "Deploy build 7?", options=["Deploy", "Hold"])
        return {"decision": answer["choice"]}

    graph = builder.compile(checkpointer=InMemorySaver())   # interrupts need a checkpointer
    result = run(graph, {"build": 7}, {"configurable": {"thread_id": "t1"}}, address)

``ask_person`` creates the request (docs/API.md §12) and calls LangGraph's ``interrupt`` with
``{"agentaddress_request": {"id", "url", "title", "options"}}``: hand the ``url`` to the person.
``resume_from_feed`` reads the address's feed for the ``request.answered`` (or
``request.expired``) events of the pending requests and returns the ``Command`` that resumes
the graph; ``run`` loops invoke → wait → resume until the graph ends. A process that exits
while waiting can resume later: the answer stays in the feed, and the checkpointer keeps the
graph.

Async graphs use :func:`aask_person`, :func:`aresume_from_feed` and :func:`arun` with an
:class:`~agentaddress_client.AsyncAddress` (``graph.ainvoke``); a waiting graph then holds no
thread.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.config import get_config
from langgraph.types import Command, Interrupt, interrupt

from ._client import Address, AsyncAddress
from ._errors import AgentAddressError
from ._models import Event, PersonRequest

KEY = "agentaddress_request"
TYPES = ["request.answered", "request.expired"]


def _idempotency_key(
    config: Mapping[str, Any] | None,
    title: str,
    body: str | None,
    options: Sequence[str] | None,
) -> str:
    """The request's ``Idempotency-Key``: the thread, the node's namespace and the question, so
    that the node's second run (on resume) finds the request of its first."""
    conf = (config if config is not None else get_config()).get("configurable", {})
    seed = json.dumps(
        [
            str(conf.get("thread_id", "")),
            str(conf.get("checkpoint_ns", "")),
            title,
            body,
            list(options) if options is not None else None,
        ]
    )
    return "langgraph-" + hashlib.sha256(seed.encode()).hexdigest()[:48]


def _interrupt_for(request: PersonRequest, title: str) -> dict[str, Any]:
    answer: dict[str, Any] = interrupt(
        {KEY: {"id": request.id, "url": request.url, "title": title, "options": request.options}}
    )
    return answer


def ask_person(
    address: Address,
    title: str,
    body: str | None = None,
    options: Sequence[str] | None = None,
    *,
    expires_in_seconds: int | None = None,
    config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Inside a node: asks a person and interrupts the graph; once resumed (by
    :func:`resume_from_feed`) returns the answer ``{"request_id", "status", "choice",
    "comment", "answered_at"}`` (``status`` ``expired``, with ``choice`` ``None``, when nobody
    answered in time).

    The node runs again on resume: the request is made with an ``Idempotency-Key`` derived from
    the thread, the node's namespace and the question, so the second run finds the same request
    instead of asking twice. ``config`` is the node's config (LangGraph's own by default)."""
    key = _idempotency_key(config, title, body, options)
    request = address.ask(title, body, options, expires_in_seconds, idempotency_key=key)
    return _interrupt_for(request, title)


async def aask_person(
    address: AsyncAddress,
    title: str,
    body: str | None = None,
    options: Sequence[str] | None = None,
    *,
    expires_in_seconds: int | None = None,
    config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """:func:`ask_person` in an async node, over an :class:`AsyncAddress`. On Python 3.10 pass
    the node's ``config`` (LangGraph cannot find it from async code there)."""
    key = _idempotency_key(config, title, body, options)
    request = await address.ask(title, body, options, expires_in_seconds, idempotency_key=key)
    return _interrupt_for(request, title)


def pending_requests(interrupts: Sequence[Interrupt]) -> dict[str, str]:
    """``{interrupt id: request id}`` of the interrupts made by :func:`ask_person`."""
    out: dict[str, str] = {}
    for it in interrupts:
        value = it.value
        if isinstance(value, dict) and isinstance(value.get(KEY), dict):
            request_id = value[KEY].get("id")
            if isinstance(request_id, str):
                out[it.id] = request_id
    return out


class _Answers:
    """The answers gathered from the feed for the pending requests of some interrupts."""

    def __init__(self, interrupts: Sequence[Interrupt]) -> None:
        pending = pending_requests(interrupts)
        if not pending:
            raise ValueError("no interrupt of ask_person is pending")
        self.wanted = {request_id: interrupt_id for interrupt_id, request_id in pending.items()}
        self.answers: dict[str, Any] = {}

    def take(self, event: Event) -> Command[Any] | None:
        """Records ``event`` if it answers a pending request; the resuming ``Command`` once
        every request has its answer."""
        data = event.data if isinstance(event.data, dict) else {}
        request_id = data.get("request_id")
        if request_id not in self.wanted:
            return None
        self.answers[self.wanted.pop(request_id)] = {
            "request_id": request_id,
            "status": "answered" if event.type == "request.answered" else "expired",
            "choice": data.get("choice"),
            "comment": data.get("comment"),
            "answered_at": data.get("answered_at"),
            "event_id": event.id,
        }
        return None if self.wanted else Command(resume=self.answers)

    def timed_out(self, timeout: float | None) -> AgentAddressError:
        return AgentAddressError(
            f"no answer within {timeout} s for {sorted(self.wanted)}", code="timed_out"
        )


def resume_from_feed(
    address: Address,
    interrupts: Sequence[Interrupt],
    *,
    after: int = 0,
    timeout: float | None = None,
) -> Command[Any]:
    """Waits on the feed (``types=request.answered,request.expired``, from ``after``) until
    every pending :func:`ask_person` request has its event, and returns the ``Command`` that
    resumes the graph with the answers. Raises ``timed_out`` after ``timeout`` seconds."""
    answers = _Answers(interrupts)
    for event in address.events(after=after, types=TYPES, timeout=timeout):
        if (command := answers.take(event)) is not None:
            return command
    raise answers.timed_out(timeout)


async def aresume_from_feed(
    address: AsyncAddress,
    interrupts: Sequence[Interrupt],
    *,
    after: int = 0,
    timeout: float | None = None,
) -> Command[Any]:
    """:func:`resume_from_feed` over an :class:`AsyncAddress`."""
    answers = _Answers(interrupts)
    async for event in address.events(after=after, types=TYPES, timeout=timeout):
        if (command := answers.take(event)) is not None:
            return command
    raise answers.timed_out(timeout)


def run(
    graph: Any,
    input: Any,
    config: Any,
    address: Address,
    *,
    timeout: float | None = None,
) -> Any:
    """``graph.invoke(input, config)``, then, while it is interrupted by :func:`ask_person`,
    waits for the answers on the feed and resumes it. Returns the graph's final output."""
    result = graph.invoke(input, config)
    while True:
        interrupts = list(graph.get_state(config).interrupts)
        if not pending_requests(interrupts):
            return result
        result = graph.invoke(resume_from_feed(address, interrupts, timeout=timeout), config)


async def arun(
    graph: Any,
    input: Any,
    config: Any,
    address: AsyncAddress,
    *,
    timeout: float | None = None,
) -> Any:
    """:func:`run` with ``graph.ainvoke`` over an :class:`AsyncAddress`."""
    result = await graph.ainvoke(input, config)
    while True:
        interrupts = list((await graph.aget_state(config)).interrupts)
        if not pending_requests(interrupts):
            return result
        command = await aresume_from_feed(address, interrupts, timeout=timeout)
        result = await graph.ainvoke(command, config)


__all__ = [
    "aask_person",
    "aresume_from_feed",
    "arun",
    "ask_person",
    "pending_requests",
    "resume_from_feed",
    "run",
]
