"""The stdio fast path: ``tools/call`` answered beside the SDK, by worker threads.

Profiled on ``execute true`` over stdio, the SDK's way through a tool call (the stdin reader
task, three memory streams, the dispatcher's task, the runner's request state, telemetry spans,
the context, the stdout writer task) cost about as much as the engine's own work. Here a
``tools/call`` line is parsed once on the loop and handed to a worker thread, which runs the
same whole call the SDK's handler runs (``sandbox.mcp.server.ToolAnswer``: the same validation,
errors and results) and writes the answer straight to the wire: one thread hop per call. The
answer is shaped as the SDK's per-version serializer shapes a ``CallToolResult`` (the fields
that version knows), from the tool's plain outcome rather than through its models.

Only what needs nothing else of the SDK takes this path: a call after the client's
``notifications/initialized`` for a protocol version known here, to a known tool, without a
progress token (progress notifications go through the SDK). A ``notifications/cancelled`` for
a call in flight here cancels it (an execute stops with the escalation ladder), and, as in the
SDK, a cancelled call is never answered. Everything else (initialize, ping, listings, unknown
tools, malformed lines) goes on to the SDK untouched, in order.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from mcp_types import PROTOCOL_VERSION_META_KEY, SERVER_INFO_META_KEY
from mcp_types.methods import serialize_server_result, validate_client_request
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from sandbox.mcp.server import ToolAnswer, ToolOutcome
from sandbox.mcp.stdio_wire import WireWriter
from sandbox.mcp.tools import Call, Tools

log = logging.getLogger(__name__)

# The versions an initialize handshake reaches, and the stateless era's (each request names
# its version in ``_meta``): results are shaped by the SDK's own per-version serializer.
KNOWN_VERSIONS = frozenset(HANDSHAKE_PROTOCOL_VERSIONS)
STATELESS_VERSIONS = frozenset(MODERN_PROTOCOL_VERSIONS)
_HINTS = ('"tools/call"', '"notifications/cancelled"', '"initialize"', '"notifications/initialized')


@dataclass(frozen=True)
class _Flight:
    call: Call
    done: Future[None]
    abandon: bool


class FastPath:
    """Takes the lines it can answer; the caller passes the others to the SDK.

    A call taken here is handed to a worker thread at once, which runs the tool, shapes the
    answer and writes it to the wire itself: one thread hop per call, none back to the loop.
    """

    def __init__(
        self, tools: Tools, writer: WireWriter, server_info: Callable[[], dict[str, Any]]
    ) -> None:
        self._answers = {spec.name: ToolAnswer(spec) for spec in tools.specs()}
        self._client = tools.client(None)  # the stdio client: no token
        self._workers = ThreadPoolExecutor(tools.threads, thread_name_prefix="sandbox-call")
        self._writer = writer
        self._server_info = server_info  # the stateless era's serverInfo stamp
        self._version: str | None = None
        self._ready = False
        self._lock = threading.Lock()  # ``_in_flight``: taken on the loop, done in workers
        self._in_flight: dict[int | str, _Flight] = {}

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
            with self._lock:
                flight = None if ident is None else self._in_flight.get(ident)
            if flight is None:
                return False
            flight.call.cancel.set()
            return True
        elif method == "tools/call":
            version = self._call_version(params)
            return version is not None and self._call(message, params, version)
        return False

    def close(self) -> None:
        """Cancel the calls in flight and wait for those that wind down (an execute stops with
        the escalation ladder); calls that only wait and read are left to end on their own."""
        self._writer.close()
        with self._lock:
            flights = list(self._in_flight.values())
        for flight in flights:
            flight.call.cancel.set()
        self._workers.shutdown(wait=False, cancel_futures=True)
        wait([f.done for f in flights if not f.abandon])

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
        answer = self._answers.get(name) if isinstance(name, str) else None
        arguments = params.get("arguments", {})
        if ident is None or answer is None or not isinstance(arguments, dict):
            return False
        call = Call(self._client)
        with self._lock:
            if ident in self._in_flight:
                return False
            try:
                done = self._workers.submit(self._answer, ident, answer, arguments, call, version)
            except RuntimeError:  # closing: the SDK says so
                return False
            self._in_flight[ident] = _Flight(call, done, answer.spec.abandon)
        return True

    def _answer(
        self,
        ident: int | str,
        answer: ToolAnswer,
        arguments: dict[str, Any],
        call: Call,
        version: str,
    ) -> None:
        """In a worker thread: the call, then its answer on the wire unless it was cancelled."""
        try:
            outcome = answer.outcome(arguments, call)
            if call.cancel.is_set():
                return  # a cancelled request is never answered
            self._writer.write_line(self._reply(ident, outcome, version))
        except Exception:
            log.exception("answering request %r failed", ident)
        finally:
            with self._lock:
                del self._in_flight[ident]

    def _reply(self, ident: int | str, outcome: ToolOutcome, version: str) -> str:
        body = result_body(outcome, version)
        if version in STATELESS_VERSIONS:  # as the SDK's runner finishes such a result
            body["_meta"] = {SERVER_INFO_META_KEY: self._server_info()}
        reply = {"jsonrpc": "2.0", "id": ident, "result": body}
        return json.dumps(reply, separators=(",", ":"), ensure_ascii=False) + "\n"


def result_body(outcome: ToolOutcome, version: str) -> dict[str, Any]:
    """``outcome`` as the SDK's serializer dumps its ``CallToolResult`` for ``version``: the
    same JSON (``tests/unit/test_stdio_fast.py`` holds the two side by side), at a tenth of
    the cost of building and validating its models twice."""
    body: dict[str, Any] = {"content": [{"type": "text", "text": outcome.text()}]}
    if not outcome.is_error:
        body["structuredContent"] = outcome.data
    body["isError"] = outcome.is_error
    body["resultType"] = "complete"
    kept = _result_fields(version)
    return body if kept.issuperset(body) else {k: v for k, v in body.items() if k in kept}


@functools.cache
def _result_fields(version: str) -> frozenset[str]:
    """The fields of a tool result that ``version``'s schema has (``structuredContent`` came
    in 2025-06-18): what its serializer keeps of one that carries them all."""
    every = {"content": [], "structuredContent": {}, "isError": False, "resultType": "complete"}
    return frozenset(serialize_server_result("tools/call", version, every))


def _request_id(value: object) -> int | str | None:
    """A JSON-RPC request id (a string or an integer; ``true`` is not one)."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None
