"""The framework adapters, without a model: the OpenAI Agents SDK's tools invoked directly with
JSON arguments, and a LangGraph graph that interrupts for a person and resumes with the answer
read from the feed (the person answers on the request's page, over HTTP)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any, TypedDict

import httpx

from agentaddress_client import AsyncClient, Client


def _invoke(tool: Any, args: dict[str, Any]) -> Any:
    from agents.tool_context import ToolContext

    raw = json.dumps(args)
    ctx = ToolContext(context=None, tool_name=tool.name, tool_call_id="call_1", tool_arguments=raw)
    out = asyncio.run(tool.on_invoke_tool(ctx, raw))
    return json.loads(out)


def test_openai_agents_tools(client: Client) -> None:
    from agentaddress_client.openai_agents import tools

    a = client.create_address()
    token = a._AddressCore__token
    ts = {t.name: t for t in tools(a)}
    assert set(ts) == {
        "wait_for_events",
        "acknowledge_event",
        "get_state",
        "set_state",
        "ask_person",
        "wait_for_answer",
    }
    for t in ts.values():
        schema = json.dumps(t.params_json_schema)
        assert token not in schema and "token" not in schema.lower() and "address_id" not in schema

    a.deliver({"type": "ci.finished", "data": {"ok": True}})
    results = []
    got = _invoke(ts["wait_for_events"], {"wait_seconds": 5, "types": None})
    results.append(got)
    assert [e["type"] for e in got["events"]] == ["ci.finished"]
    event_id = got["events"][0]["id"]
    results.append(_invoke(ts["acknowledge_event"], {"event_id": event_id}))
    assert a.event(event_id).acknowledged_at is not None
    results.append(
        _invoke(ts["set_state"], {"key": "plan", "value_json": '{"step": 2}', "if_revision": 0})
    )
    state = _invoke(ts["get_state"], {"key": "plan"})
    results.append(state)
    assert state["value"] == {"step": 2} and state["exists"] is True
    # The next wait returns only what is new (the tool keeps its cursor).
    got2 = _invoke(ts["wait_for_events"], {"wait_seconds": 0, "types": ["state.*"]})
    results.append(got2)
    assert [e["type"] for e in got2["events"]] == ["state.updated"]
    asked = _invoke(ts["ask_person"], {"title": "Ship?", "body": None, "options": ["Yes", "No"]})
    results.append(asked)
    assert asked["url"].startswith(client.base_url + "/r/")
    threading.Timer(0.5, lambda: httpx.post(asked["url"], data={"choice": "Yes"})).start()
    answered = _invoke(
        ts["wait_for_answer"], {"request_id": asked["request_id"], "timeout_seconds": 20}
    )
    results.append(answered)
    assert answered["status"] == "answered" and answered["answer"]["choice"] == "Yes"
    # An error reaches the model as text, without the token.
    conflict = asyncio.run(
        ts["set_state"].on_invoke_tool(
            _ctx("set_state"), json.dumps({"key": "plan", "value_json": "1", "if_revision": 0})
        )
    )
    results.append(conflict)
    assert "revision" in str(conflict).lower()
    assert token not in json.dumps(results)


def _ctx(name: str) -> Any:
    from agents.tool_context import ToolContext

    return ToolContext(context=None, tool_name=name, tool_call_id="c", tool_arguments="{}")


def test_langgraph_interrupt_resumes_with_the_persons_answer(client: Client) -> None:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph

    from agentaddress_client.langgraph import ask_person, resume_from_feed, run

    a = client.create_address(name="graph")
    runs = []

    class S(TypedDict, total=False):
        build: int
        decision: str
        comment: str

    def approve(state: S) -> S:
        runs.append(state["build"])
        answer = ask_person(a, f"Deploy build {state['build']}?", options=["Deploy", "Hold"])
        return {"decision": answer["choice"], "comment": answer["comment"]}

    builder = StateGraph(S)
    builder.add_node("approve", approve)
    builder.add_edge(START, "approve")
    builder.add_edge("approve", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t-1"}}

    result = graph.invoke({"build": 7}, config)
    pending = result["__interrupt__"]
    request = pending[0].value["agentaddress_request"]
    assert request["options"] == ["Deploy", "Hold"]
    # The person answers on the page, as a browser posts its form.
    page = httpx.get(request["url"])
    assert "Deploy build 7?" in page.text
    r = httpx.post(request["url"], data={"choice": "Hold", "comment": "not on Friday"})
    assert r.status_code == 303
    result = graph.invoke(resume_from_feed(a, pending, timeout=20), config)
    assert result["decision"] == "Hold" and result["comment"] == "not on Friday"
    assert runs == [7, 7]  # the node ran again on resume, and asked only once:
    assert len([e for e in a.poll(after=0).events if e.type == "request.answered"]) == 1
    assert a.request(request["id"]).status == "answered"

    # run(): invoke, wait on the feed, resume, in one call; the person answers meanwhile.
    config2: Any = {"configurable": {"thread_id": "t-2"}}

    def person() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            state = graph.get_state(config2)
            if state.interrupts:
                url = state.interrupts[0].value["agentaddress_request"]["url"]
                httpx.post(url, data={"choice": "Deploy"})
                return
            time.sleep(0.1)

    threading.Thread(target=person, daemon=True).start()
    final = run(graph, {"build": 8}, config2, a, timeout=30)
    assert final["decision"] == "Deploy"


def test_openai_agents_tools_over_the_async_client(server: Any) -> None:
    """The tools over an AsyncAddress, in one event loop: a tool that waits (for an answer)
    leaves the loop free, so the person's answer, posted by a task of the same loop, reaches
    it."""
    from agents.tool_context import ToolContext

    from agentaddress_client.openai_agents import tools

    async def main() -> None:
        async with AsyncClient(server.base) as c:
            a = await c.create_address()
            token = a._AddressCore__token
            ts = {t.name: t for t in tools(a)}
            results: list[Any] = []

            async def invoke(name: str, args: dict[str, Any]) -> Any:
                raw = json.dumps(args)
                ctx = ToolContext(
                    context=None, tool_name=name, tool_call_id="c", tool_arguments=raw
                )
                out = json.loads(await ts[name].on_invoke_tool(ctx, raw))
                results.append(out)
                return out

            await a.deliver({"type": "ci.finished"})
            got = await invoke("wait_for_events", {"wait_seconds": 5, "types": None})
            assert [e["type"] for e in got["events"]] == ["ci.finished"]
            await invoke("acknowledge_event", {"event_id": got["events"][0]["id"]})
            assert (await a.event(got["events"][0]["id"])).acknowledged_at is not None
            await invoke("set_state", {"key": "k", "value_json": "[1]", "if_revision": 0})
            assert (await invoke("get_state", {"key": "k"}))["value"] == [1]
            asked = await invoke("ask_person", {"title": "Ship?", "body": None, "options": None})

            async def person() -> None:
                await asyncio.sleep(0.5)
                async with httpx.AsyncClient() as h:
                    answer = {"choice": "Approve", "comment": "yes, ship it"}
                    r = await h.post(asked["url"], data=answer)
                    assert r.status_code == 303

            answered, _ = await asyncio.gather(
                invoke(
                    "wait_for_answer",
                    {"request_id": asked["request_id"], "timeout_seconds": 20},
                ),
                person(),
            )
            assert answered["status"] == "answered"
            assert answered["answer"] | {"answered_at": None} == {
                "choice": "Approve",
                "comment": "yes, ship it",
                "answered_at": None,
            }
            assert token not in json.dumps(results)

    asyncio.run(main())


def test_langgraph_async_graph_resumes_with_the_persons_answer(server: Any) -> None:
    """An async graph: aask_person in an async node, arun waiting on the feed while a task of
    the same loop answers on the request's page."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph

    from agentaddress_client.langgraph import aask_person, arun

    class S(TypedDict, total=False):
        build: int
        decision: str

    async def main() -> None:
        async with AsyncClient(server.base) as c:
            a = await c.create_address(name="async graph")
            runs: list[int] = []

            async def approve(state: S) -> S:
                runs.append(state["build"])
                answer = await aask_person(
                    a, f"Deploy build {state['build']}?", options=["Deploy", "Hold"]
                )
                return {"decision": answer["choice"]}

            builder = StateGraph(S)
            builder.add_node("approve", approve)
            builder.add_edge(START, "approve")
            builder.add_edge("approve", END)
            graph = builder.compile(checkpointer=InMemorySaver())
            config: Any = {"configurable": {"thread_id": "async-1"}}

            async def person() -> None:
                async with httpx.AsyncClient() as h:
                    for _ in range(200):
                        state = await graph.aget_state(config)
                        if state.interrupts:
                            url = state.interrupts[0].value["agentaddress_request"]["url"]
                            r = await h.post(url, data={"choice": "Deploy"})
                            assert r.status_code == 303
                            return
                        await asyncio.sleep(0.1)
                raise AssertionError("the graph never asked")

            final, _ = await asyncio.gather(
                arun(graph, {"build": 9}, config, a, timeout=30), person()
            )
            assert final["decision"] == "Deploy"
            assert runs == [9, 9]  # ran again on resume, and asked once:
            page = await a.poll(after=0)
            assert [e.type for e in page.events].count("request.answered") == 1

    asyncio.run(main())
