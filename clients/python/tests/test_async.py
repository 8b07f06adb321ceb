"""AsyncClient: the same operations as coroutines (one code path with Client)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentaddress_client import AsyncAddress, AsyncClient, RevisionConflict, Unauthorized


def test_async_surface(server: Any, home: Path) -> None:
    async def main() -> None:
        async with AsyncClient(server.base) as c:
            a = await c.create_address(name="async")
            assert isinstance(a, AsyncAddress)
            assert a.inbox_url is not None
            await c.deliver(a.inbox_url, {"type": "one"})
            await a.deliver({"type": "two"})
            page = await a.poll()
            assert [e.type for e in page.events] == ["one", "two"]
            await a.ack(page.events[0].id)
            r = await a.state.put("k", [1])
            assert await a.state.get("k") == ([1], r)
            with pytest.raises(RevisionConflict):
                await a.state.put("k", 2, if_revision=0)
            value, _ = await a.state.update("k", lambda v: v + [2])
            assert value == [1, 2]
            req = await a.ask("ok?")
            assert (await a.request(req.id)).status == "open"
            hook, secret = await a.add_hook("http://127.0.0.1:9/h")
            assert [h.id for h in await a.hooks()] == [hook.id]
            timer = await a.set_timer(100)
            assert (await a.cancel_timer(timer.id)).status == "cancelled"
            a.save("async-task")
            loaded = c.load("async-task")
            assert loaded.cursor == 1 and loaded.hook_secrets == {hook.id: secret}

            # events(): an async iterator, woken by a delivery made while it waits.
            async def later() -> None:
                await asyncio.sleep(0.3)
                await c.deliver(a.inbox_url or "", {"type": "three"})

            task = asyncio.create_task(later())
            got = []
            async for e in loaded.events(types=["one", "two", "three"]):
                got.append(e.type)
                if e.type == "three":
                    break
            await task
            assert got == ["two", "three"]
            with pytest.raises(Unauthorized):
                await c.address(a.id, "aat_wrong").poll()

    asyncio.run(main())
