"""``sandbox serve`` as a subprocess for the tests that drive it over HTTP: start it on a free
port, wait until it answers ``/healthz``, stop it."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import httpx
from mcp.types import CallToolResult

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
START_S = 30  # a loaded engine can take a while: startup runs gc and adopts durable sessions


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


def start_server(
    env: dict[str, str], *, host: str = "127.0.0.1", port: int | None = None, quiet: bool = True
) -> Served:
    """``sandbox serve`` on ``host`` (reached on loopback), once it answers /healthz.
    ``quiet`` drops its stderr (tests that provoke errors on purpose)."""
    port = port or free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox", "serve", "--host", host, "--port", str(port)],
        env=env,
        stderr=subprocess.DEVNULL if quiet else None,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_S
    try:
        while True:
            assert proc.poll() is None, "sandbox serve exited during startup"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    return Served(proc, base, port, env)
            assert time.monotonic() < deadline, "sandbox serve did not answer /healthz"
            time.sleep(0.1)
    except BaseException:
        if proc.poll() is None:  # never leave a half-started server behind
            proc.terminate()
            proc.wait(timeout=30)
        raise


def stop_server(served: Served) -> int:
    """SIGTERM (if it still runs), then its exit code."""
    if served.proc.poll() is None:
        served.proc.terminate()
    return served.proc.wait(timeout=30)


def initialize(client: str, ident: int = 1) -> dict[str, Any]:
    """A JSON-RPC ``initialize`` request, for tests that speak the protocol by hand."""
    return {
        "jsonrpc": "2.0",
        "id": ident,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": client, "version": "0"},
        },
    }


def payload(result: CallToolResult) -> dict[str, Any]:
    """A tool result's data: a success's structured content (equal to its text), an error's
    ``{"error": ...}`` from its text (an error carries no structured content: clients validate
    structured content against the tool's output schema, errors included)."""
    assert len(result.content) == 1
    block = result.content[0]
    assert block.type == "text"
    data = json.loads(block.text)
    assert isinstance(data, dict)
    if result.is_error:
        assert result.structured_content is None, "an error result must carry no structured content"
        assert set(data) == {"error"}
    else:
        assert result.structured_content == data
    return data


def refusal(response: httpx.Response) -> dict[str, Any]:
    """The contract's error of an HTTP refusal: the body's ``error``, or, for a request that
    accepts ``text/event-stream`` (an MCP client), the same inside a JSON-RPC error's data
    (the MCP SDKs surface a JSON-RPC error body; they drop anything else)."""
    body = response.json()
    if "text/event-stream" in response.request.headers.get("accept", ""):
        assert body["jsonrpc"] == "2.0"
        assert isinstance(body["error"]["code"], int)
        error = body["error"]["data"]["error"]
        assert error["code"] in body["error"]["message"]
    else:
        error = body["error"]
    assert set(error) == {"code", "message", "hint"}
    return dict(error)
