"""Function tools for the OpenAI Agents SDK (``pip install 'agentaddress-client[openai-agents]'``).

    from agents import Agent
    from agentaddress_client import Client
    from agentaddress_client.openai_agents import tools

    address = Client().load("deploy-42")
    agent = Agent(name="watcher", instructions="...", tools=tools(address))

The tools close over ``address``: the read token is never in a tool's schema, arguments or
results (the model never sees it). Tools: ``wait_for_events``, ``acknowledge_event``,
``get_state``, ``set_state``, ``ask_person``, ``wait_for_answer``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from agents import FunctionTool, RunContextWrapper, function_tool

from ._client import Address, AsyncAddress
from ._errors import AgentAddressError
from ._models import Event, PersonRequest


def _event(e: Event) -> dict[str, Any]:
    return {
        "id": e.id,
        "sequence": e.sequence,
        "type": e.type,
        "source": e.source,
        "received_at": e.received_at,
        "acknowledged_at": e.acknowledged_at,
        "data": e.data,
    }


def _request(r: PersonRequest) -> dict[str, Any]:
    out: dict[str, Any] = {"request_id": r.id, "status": r.status, "title": r.title}
    if r.url is not None:
        out["url"] = r.url
    if r.answer is not None:
        out["answer"] = {
            "choice": r.answer.choice,
            "comment": r.answer.comment,
            "answered_at": r.answer.answered_at,
        }
    return out


def _describe_error(ctx: RunContextWrapper[Any], error: Exception) -> str:
    """What the model reads when a tool fails: the API's error code and message (never the
    token: the server never echoes it and the client never puts it in a message)."""
    if isinstance(error, AgentAddressError):
        return json.dumps({"error": {"code": error.code, "message": error.message}})
    return json.dumps({"error": {"code": "tool_error", "message": type(error).__name__}})


def tools(address: Address | AsyncAddress) -> list[FunctionTool]:
    """The address's operations as function tools for ``agents.Agent(tools=...)``."""

    async def run(name: str, *args: Any) -> Any:
        method: Callable[..., Any] = getattr(address, name)
        if isinstance(address, AsyncAddress):
            return await method(*args)
        return await asyncio.to_thread(method, *args)

    async def run_state(name: str, *args: Any) -> Any:
        method: Callable[..., Any] = getattr(address.state, name)
        if isinstance(address, AsyncAddress):
            return await method(*args)
        return await asyncio.to_thread(method, *args)

    cursor = [address.cursor]

    @function_tool(failure_error_function=_describe_error)
    async def wait_for_events(wait_seconds: int, types: list[str] | None) -> str:
        """Wait for the next events of this agent's address (webhook deliveries, emails,
        answers of people, timers, state changes) and return them in order. Events are
        returned once each; acknowledge each one you have handled.

        Args:
            wait_seconds: How long to wait for an event, 0 to 25 seconds.
            types: Only events of these types (patterns like "email.*"), or null for all.
        """
        page = await run("poll", cursor[0], float(max(0, min(wait_seconds, 25))), types)
        cursor[0] = page.next_cursor
        return json.dumps(
            {
                "events": [_event(e) for e in page.events],
                "has_more": page.has_more,
            }
        )

    @function_tool(failure_error_function=_describe_error)
    async def acknowledge_event(event_id: str) -> str:
        """Record that an event was handled (it is not shown again after a restart).

        Args:
            event_id: The event's id (evt_...).
        """
        acked = await run("ack", event_id)
        return json.dumps({"event_id": acked.id, "acknowledged_at": acked.acknowledged_at})

    @function_tool(failure_error_function=_describe_error)
    async def get_state(key: str) -> str:
        """Read a value this agent saved (durable across runs), with its revision.

        Args:
            key: The key, 1 to 128 of A-Z a-z 0-9 . _ : -
        """
        value, revision = await run_state("get", key)
        return json.dumps(
            {"key": key, "value": value, "revision": revision, "exists": revision is not None}
        )

    @function_tool(failure_error_function=_describe_error)
    async def set_state(key: str, value_json: str, if_revision: int | None) -> str:
        """Save a small JSON value under a key (durable across runs).

        Args:
            key: The key, 1 to 128 of A-Z a-z 0-9 . _ : -
            value_json: The value, as JSON text.
            if_revision: Write only if the key is at this revision (0: only if it does not
                exist), or null to write unconditionally.
        """
        value = json.loads(value_json)
        revision = await run_state("put", key, value, if_revision)
        return json.dumps({"key": key, "revision": revision})

    @function_tool(failure_error_function=_describe_error)
    async def ask_person(title: str, body: str | None, options: list[str] | None) -> str:
        """Ask a person a question. Returns the request's id and the URL of the page where the
        person answers: give that URL to the person. Then wait_for_answer.

        Args:
            title: The question, at most 200 characters.
            body: Details in Markdown, or null.
            options: 1 to 5 answer buttons, or null for ["Approve", "Reject"].
        """
        request = await run("ask", title, body, options)
        return json.dumps(_request(request))

    @function_tool(failure_error_function=_describe_error)
    async def wait_for_answer(request_id: str, timeout_seconds: int) -> str:
        """Wait for a person's answer to a request made with ask_person.

        Args:
            request_id: The request's id (req_...).
            timeout_seconds: How long to wait; the result says "open" if nobody answered yet.
        """
        request = await run("request", request_id)
        if request.status == "open" and timeout_seconds > 0:
            try:
                request = await run("wait_for_answer", request_id, float(timeout_seconds))
            except AgentAddressError as e:  # timed out: report the request as it is
                if e.code != "timed_out":
                    raise
                request = await run("request", request_id)
        return json.dumps(_request(request))

    return [
        wait_for_events,
        acknowledge_event,
        get_state,
        set_state,
        ask_person,
        wait_for_answer,
    ]


__all__ = ["tools"]
