"""Fault suite fixtures: the engine (failing instead of skipping under SANDBOX_REQUIRE_DOCKER=1)
and the security suite's ``sec-<random>`` owner, so every container is removed by its label."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from tests.integration.conftest import *  # noqa: F403  (docker_client, allowed_root, ...)
from tests.security.conftest import (  # noqa: F401  (fixtures)
    SEC_OWNER,
    engine,
    open_session,
    sec_config,
    sec_project,
)
from tests.served import Served, free_port, payload, start_server, stop_server  # noqa: F401


def serve_env(owner: str, state: Path, allowed_root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_")}
    env.update(
        SANDBOX_OWNER=owner,
        SANDBOX_STATE_DIR=str(state),
        SANDBOX_ALLOWED_ROOTS=str(allowed_root),
        SANDBOX_MEMORY_MB="256",
        SANDBOX_RECORD="0",
        **extra,
    )
    return env


@contextlib.contextmanager
def running_server(env: dict[str, str]) -> Iterator[Served]:
    served = start_server(env)
    try:
        yield served
    finally:
        if served.proc.poll() is None:
            stop_server(served)


def mcp_calls(
    base: str, calls: list[tuple[str, dict[str, object]]], token: str | None = None
) -> list[dict[str, object]]:
    """Tool calls over one MCP connection to ``base``; each structured result (or error)."""
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def go() -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http,
            Client(streamable_http_client(base + "/mcp", http_client=http)) as client,
        ):
            with anyio.fail_after(120):
                for tool, arguments in calls:
                    result = await client.call_tool(tool, arguments)
                    out.append(payload(result))
        return out

    return anyio.run(go)
