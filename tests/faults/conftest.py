"""Fault suite fixtures: the engine (failing instead of skipping under SANDBOX_REQUIRE_DOCKER=1)
and the security suite's ``sec-<random>`` owner, so every container is removed by its label."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.integration.conftest import *  # noqa: F403  (docker_client, allowed_root, ...)
from tests.security.conftest import (  # noqa: F401  (fixtures)
    SEC_OWNER,
    engine,
    open_session,
    sec_config,
    sec_project,
)

START_S = 30


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    base: str
    port: int
    env: dict[str, str]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


def start_server(env: dict[str, str], port: int | None = None) -> Served:
    """``sandbox serve`` on 127.0.0.1, once it answers /healthz."""
    port = port or free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_S
    while True:
        assert proc.poll() is None, "sandbox serve exited during startup"
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                return Served(proc, base, port, env)
        assert time.monotonic() < deadline, "sandbox serve did not answer /healthz"
        time.sleep(0.1)


def stop_server(served: Served) -> int:
    if served.proc.poll() is None:
        served.proc.terminate()
    return served.proc.wait(timeout=30)


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
                    assert result.structured_content is not None
                    out.append(result.structured_content)
        return out

    return anyio.run(go)
