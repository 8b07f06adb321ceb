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
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from langgraph.config import get_config
from langgraph.types import Command, Interrupt, interrupt

from ._client import Address
from ._errors import AgentAddressError

KEY = "agentaddress_request"
TYPES = ["request.answered", "request.expired"]


def ask_person(
    address: Address,
    title: str,
    body: str | None = None,
    options: Sequence[str] | None = None,
    *,
    expires_in_seconds: int | None = None,
) -> dict[str, Any]:
    """Inside a node: asks a person and interrupts the graph; once resumed (by
    :func:`resume_from_feed`) returns the answer ``{"request_id", "status", "choice",
    "comment", "answered_at"}`` (``status`` ``expired``, with ``choice`` ``None``, when nobody
    answered in time).

    The node runs again on resume: the request is made with an ``Idempotency-Key`` derived from
    the thread, the node's namespace and the question, so the second run finds the same request
    instead of asking twice."""
    config = get_config()
    conf = config.get("configurable", {})
    seed = json.dumps(
        [
            str(conf.get("thread_id", "")),
            str(conf.get("checkpoint_ns", "")),
            title,
            body,
            list(options) if options is not None else None,
        ]
    )
    key = "langgraph-" + hashlib.sha256(seed.encode()).hexdigest()[:48]
    request = address.ask(title, body, options, expires_in_seconds, idempotency_key=key)
    answer: dict[str, Any] = interrupt(
        {KEY: {"id": request.id, "url": request.url, "title": title, "options": request.options}}
    )
    return answer


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
    pending = pending_requests(interrupts)
    if not pending:
        raise ValueError("no interrupt of ask_person is pending")
    wanted = {request_id: interrupt_id for interrupt_id, request_id in pending.items()}
    answers: dict[str, Any] = {}
    for event in address.events(after=after, types=TYPES, timeout=timeout):
        data = event.data if isinstance(event.data, dict) else {}
        request_id = data.get("request_id")
        if request_id in wanted:
            answers[wanted.pop(request_id)] = {
                "request_id": request_id,
                "status": "answered" if event.type == "request.answered" else "expired",
                "choice": data.get("choice"),
                "comment": data.get("comment"),
                "answered_at": data.get("answered_at"),
                "event_id": event.id,
            }
            if not wanted:
                return Command(resume=answers)
    raise AgentAddressError(f"no answer within {timeout} s for {sorted(wanted)}", code="timed_out")


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


__all__ = ["ask_person", "pending_requests", "resume_from_feed", "run"]
