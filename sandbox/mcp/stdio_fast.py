"""The stdio fast path: ``tools/call`` answered on the event loop, beside the SDK.

Profiled on ``execute true`` over stdio, the SDK's way through a tool call (the stdin reader
task, three memory streams, the dispatcher's task, the runner's request state, telemetry spans,
the context, the stdout writer task) cost about as much as the engine's own work. Here a
``tools/call`` line is parsed once, its arguments go to the same tool runner the SDK calls
(``sandbox.mcp.server.tool_runner``: the same validation, errors and results), and the answer
is written straight to the wire.

Only what needs nothing else of the SDK takes this path: a call after the client's
``notifications/initialized`` for a protocol version known here, to a known tool, without a
progress token (progress notifications go through the SDK). A ``notifications/cancelled`` for
a call in flight here cancels it, and, as in the SDK, a cancelled call is never answered.
Everything else (initialize, ping, listings, unknown tools, malformed lines) goes on to the SDK
untouched, in order.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import anyio
import anyio.abc
from mcp_types import PROTOCOL_VERSION_META_KEY, SERVER_INFO_META_KEY
from mcp_types.methods import serialize_server_result, validate_client_request
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from sandbox.mcp.server import ToolRunner
from sandbox.mcp.stdio_wire import WireWriter

log = logging.getLogger(__name__)

# The versions an initialize handshake reaches, and the stateless era's (each request names
# its version in ``_meta``): results are shaped by the SDK's own per-version serializer.
KNOWN_VERSIONS = frozenset(HANDSHAKE_PROTOCOL_VERSIONS)
STATELESS_VERSIONS = frozenset(MODERN_PROTOCOL_VERSIONS)
_HINTS = ('"tools/call"', '"notifications/cancelled"', '"initialize"', '"notifications/initialized')


class FastPath:
    """Takes the lines it can answer; the caller passes the others to the SDK."""

    def __init__(
        self,
        runners: Mapping[str, ToolRunner],
        writer: WireWriter,
        tg: anyio.abc.TaskGroup,
        server_info: Callable[[], dict[str, Any]],
    ) -> None:
        self._runners = runners
        self._server_info = server_info  # the stateless era's serverInfo stamp
        self._writer = writer
        self._tg = tg
        self._version: str | None = None
        self._ready = False
        self._in_flight: dict[int | str, anyio.CancelScope] = {}

    def take(self, line: str) -> bool:
        """Whether ``line`` was handled here (else it is for the SDK)."""
        if not any(hint in line for hint in _HINTS):
            return False
        try:
            message = json.loads(line)
        except ValueError:
            return False
        if not isinstance(message, dict):
            return False
        method, params = message.get("method"), message.get("params", {})
        if not isinstance(params, dict):
            return False
        if method == "initialize" and "id" in message:
            version = params.get("protocolVersion")
            self._version = version if isinstance(version, str) else None
            self._ready = False
        elif method == "notifications/initialized":
            self._ready = self._version in KNOWN_VERSIONS
        elif method == "notifications/cancelled":
            ident = _request_id(params.get("requestId"))
            scope = None if ident is None else self._in_flight.get(ident)
            if scope is None:
                return False
            scope.cancel()
            return True
        elif method == "tools/call":
            version = self._call_version(params)
            return version is not None and self._call(message, params, version)
        return False

    def _call_version(self, params: dict[str, Any]) -> str | None:
        """The protocol version a call speaks, when this module can answer it."""
        meta = params.get("_meta")
        if not isinstance(meta, dict):
            return self._version if self._ready else None
        if "progressToken" in meta:
            return None
        version = meta.get(PROTOCOL_VERSION_META_KEY)
        if version not in STATELESS_VERSIONS:
            return self._version if self._ready and version is None else None
        try:  # the SDK checks a stateless request's envelope: so does this
            validate_client_request("tools/call", version, params)
        except (ValueError, KeyError, ValidationError):
            return None  # the SDK answers it, with its error
        return str(version)

    def _call(self, message: dict[str, Any], params: dict[str, Any], version: str) -> bool:
        ident = _request_id(message.get("id"))
        name = params.get("name")
        runner = self._runners.get(name) if isinstance(name, str) else None
        arguments = params.get("arguments", {})
        if ident is None or runner is None or ident in self._in_flight:
            return False
        if not isinstance(arguments, dict):
            return False
        scope = anyio.CancelScope()
        self._in_flight[ident] = scope
        self._tg.start_soon(self._answer, ident, runner, arguments, scope, version)
        return True

    async def _answer(
        self,
        ident: int | str,
        runner: ToolRunner,
        arguments: dict[str, Any],
        scope: anyio.CancelScope,
        version: str,
    ) -> None:
        try:
            with scope:
                result = await runner(arguments, None)
        finally:
            del self._in_flight[ident]
        if scope.cancel_called:
            return  # a cancelled request is never answered
        dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        body = serialize_server_result("tools/call", version, dumped)
        if version in STATELESS_VERSIONS:  # as the SDK's runner finishes such a result
            body.setdefault("resultType", "complete")
            body["_meta"] = {**body.get("_meta", {}), SERVER_INFO_META_KEY: self._server_info()}
        reply = {"jsonrpc": "2.0", "id": ident, "result": body}
        text = json.dumps(reply, separators=(",", ":"), ensure_ascii=False)
        await self._writer.write(text + "\n")


def _request_id(value: object) -> int | str | None:
    """A JSON-RPC request id (a string or an integer; ``true`` is not one)."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


async def routed(lines: AsyncIterator[str], fast: FastPath) -> AsyncIterator[str]:
    """The lines the fast path did not take, in order."""
    async for line in lines:
        if not fast.take(line):
            yield line
