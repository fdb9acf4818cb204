"""The stdio fast path answers tool calls as the SDK would, takes only what it may, and honours
cancellation; the fake backend runs real shells on host ptys, the wire is a real pipe."""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from mcp_types import PROTOCOL_VERSION_META_KEY, SERVER_INFO_META_KEY
from mcp_types.methods import serialize_server_result

from sandbox.backends.fake import FakeBackend
from sandbox.config import SandboxConfig
from sandbox.errors import SessionNotFoundError
from sandbox.mcp.server import ToolOutcome, build_server_and_tools
from sandbox.mcp.stdio_fast import KNOWN_VERSIONS, STATELESS_VERSIONS, FastPath, result_body
from sandbox.mcp.stdio_wire import WireWriter, wire_lines
from sandbox.session.manager import SessionManager

pytestmark = pytest.mark.anyio
LIMIT_S = 20


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def manager(allowed_root: Path, tmp_path: Path) -> Iterator[SessionManager]:
    config = SandboxConfig(
        owner=f"fasttest-{secrets.token_hex(4)}",
        state_dir=tmp_path / "state",
        allowed_roots=(allowed_root,),
    )
    mgr = SessionManager(config, FakeBackend())
    yield mgr
    mgr.close()


class Wire:
    """A fast path writing to a real pipe, and the lines that come out of it."""

    def __init__(self, fast: FastPath, read_fd: int) -> None:
        self.fast = fast
        self._lines = wire_lines(read_fd)

    def take(self, message: dict[str, Any]) -> bool:
        return self.fast.take(json.dumps(message))

    async def reply(self) -> dict[str, Any]:
        with anyio.fail_after(LIMIT_S):
            line = await self._lines.__anext__()
        data: dict[str, Any] = json.loads(line)
        return data

    def initialize(self, version: str = "2025-06-18") -> None:
        params = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t"}}
        assert not self.take({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
        assert not self.take({"jsonrpc": "2.0", "method": "notifications/initialized"})


@pytest.fixture
async def wire(manager: SessionManager) -> AsyncIterator[Wire]:
    server, tools = build_server_and_tools(manager.config, manager)
    stamp = server._lowlevel_server.server_info_stamp
    read_fd, write_fd = os.pipe()
    fast = FastPath(tools, WireWriter(write_fd), lambda: stamp)
    try:
        yield Wire(fast, read_fd)
    finally:
        fast.close()
        os.close(read_fd)
        os.close(write_fd)


def tool_call(ident: int | str, name: str, **arguments: Any) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params}


async def test_a_call_is_answered_as_the_sdk_answers_it(wire: Wire) -> None:
    wire.initialize()
    assert wire.take(tool_call(7, "session_list"))
    reply = await wire.reply()
    data = {"sessions": [], "count": 0}
    assert reply == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {
            "content": [{"type": "text", "text": json.dumps(data)}],
            "isError": False,
            "structuredContent": data,
        },
    }


async def test_a_stateless_era_call_is_answered_without_a_handshake(wire: Wire) -> None:
    call = tool_call(8, "session_list")
    call["params"]["_meta"] = {
        PROTOCOL_VERSION_META_KEY: "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    assert wire.take(call)
    result = (await wire.reply())["result"]
    assert result["resultType"] == "complete"
    assert result["_meta"][SERVER_INFO_META_KEY]["name"] == "sandbox"
    assert result["structuredContent"] == {"sessions": [], "count": 0}
    del call["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    assert not wire.take(call)  # an envelope the SDK refuses: the SDK says why


async def test_errors_are_the_contracts_with_no_structured_content(wire: Wire) -> None:
    wire.initialize()
    assert wire.take(tool_call("a1", "session_info", session_id="nope"))
    result = (await wire.reply())["result"]
    assert result["isError"]
    assert "structuredContent" not in result
    assert json.loads(result["content"][0]["text"])["error"]["code"] == "SESSION_NOT_FOUND"


async def test_what_needs_the_sdk_goes_to_the_sdk(wire: Wire) -> None:
    assert not wire.take(tool_call(1, "session_list"))  # not initialized yet
    wire.initialize()
    assert not wire.take(tool_call(2, "no_such_tool"))
    with_progress = tool_call(3, "session_list")
    with_progress["params"]["_meta"] = {"progressToken": "t"}
    assert not wire.take(with_progress)
    assert not wire.take({"jsonrpc": "2.0", "id": 4, "method": "ping"})
    assert not wire.take(tool_call(True, "session_list"))  # not a request id
    assert not wire.fast.take('{"method": "tools/call", "params": ')  # malformed: the SDK says


async def test_an_unknown_protocol_version_keeps_everything_on_the_sdk(wire: Wire) -> None:
    wire.initialize("2099-01-01")
    assert not wire.take(tool_call(1, "session_list"))


async def test_a_cancelled_call_is_stopped_and_never_answered(
    wire: Wire, allowed_root: Path
) -> None:
    wire.initialize()
    project = str(allowed_root)
    assert wire.take(tool_call(1, "execute", project_path=project, command="sleep 30"))
    await anyio.sleep(1.0)  # the session starts and the command runs
    cancel = {"requestId": 1, "reason": "user"}
    assert wire.take({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
    assert wire.take(tool_call(2, "execute", project_path=project, command="echo after"))
    reply = await wire.reply()
    assert reply["id"] == 2  # nothing for 1
    assert reply["result"]["structuredContent"]["output"] == "after\n"


async def test_closing_stops_a_call_in_flight_before_it_returns(
    wire: Wire, allowed_root: Path, manager: SessionManager
) -> None:
    wire.initialize()
    project = str(allowed_root)
    assert wire.take(tool_call(1, "execute", project_path=project, command="echo up"))
    assert (await wire.reply())["result"]["structuredContent"]["output"] == "up\n"
    assert wire.take(tool_call(2, "execute", project_path=project, command="sleep 30"))
    await anyio.sleep(0.5)  # the command runs
    t0 = time.monotonic()
    await anyio.to_thread.run_sync(wire.fast.close)
    assert time.monotonic() - t0 < 10  # the escalation ladder, not the 30 s
    (session,) = manager.list_sessions().sessions
    assert not session.busy  # the command was stopped before close returned
    assert not wire.take(tool_call(3, "session_list"))  # closed: the SDK answers from now on


@pytest.mark.parametrize("version", sorted(KNOWN_VERSIONS | STATELESS_VERSIONS))
@pytest.mark.parametrize(
    "outcome",
    [
        ToolOutcome({"output": "é\u2028\x1b[0m\n", "exit_code": None, "log": {"n": [1, 2.5]}}),
        ToolOutcome.failure(SessionNotFoundError("no session 'x'", hint="Call session_list.")),
    ],
    ids=["ok", "error"],
)
def test_a_result_is_shaped_as_the_sdks_serializer_shapes_it(
    version: str, outcome: ToolOutcome
) -> None:
    sdk = outcome.result().model_dump(by_alias=True, mode="json", exclude_none=True)
    assert result_body(outcome, version) == serialize_server_result("tools/call", version, sdk)
