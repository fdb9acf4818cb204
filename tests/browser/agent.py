"""The agent of the browser tests: a real MCP client over HTTP with one bearer token."""

from __future__ import annotations

import json
import threading
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


class Agent:
    """An MCP client over HTTP with one token: what the person's agent does."""

    def __init__(self, base: str, token: str) -> None:
        self.url = base + "/mcp"
        self.headers = {"Authorization": f"Bearer {token}"}

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            async with (
                httpx2.AsyncClient(headers=self.headers, timeout=httpx2.Timeout(30, read=120)) as h,
                Client(streamable_http_client(self.url, http_client=h)) as client,
            ):
                with anyio.fail_after(90):
                    result = await client.call_tool(tool, arguments)
            text = result.content[0].text  # type: ignore[union-attr]
            data: dict[str, Any] = json.loads(text)
            return data

        # Playwright's sync API runs an event loop in this thread: the client gets its own
        results: list[dict[str, Any]] = []
        worker = threading.Thread(target=lambda: results.append(anyio.run(go)))
        worker.start()
        worker.join()
        assert results, f"{tool} failed (see the thread's exception above)"
        return results[0]
