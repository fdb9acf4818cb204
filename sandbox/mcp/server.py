"""The MCP server: the contract's eleven tools and ``session_update`` (``sandbox.mcp.tools``),
registered with the SDK.

``build_server(config, manager)`` returns an ``MCPServer``; ``sandbox.mcp.stdio`` serves it
on stdin/stdout (``sandbox mcp``) and ``sandbox.mcp.http`` over streamable HTTP (``sandbox
serve``); neither is imported here. Tool texts live in ``sandbox.mcp.texts``. Each tool:

* validates its arguments itself (``sandbox.mcp.inputs``), so a bad one becomes the contract's
  ``INVALID_ARGUMENT`` result naming the field instead of the SDK's plain-text error;
* runs whole (validation, engine call, result) in a worker thread, never on the event loop;
* returns the engine model's dict as structured content plus the same JSON as text, or
  ``isError`` with ``{"error": {"code", "message", "hint"}}``.

Over HTTP each bearer token is a client with its own sessions and quota
(``sandbox.mcp.clients``).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import CallToolResult, TextContent
from pydantic import ConfigDict, ValidationError

from sandbox.config import SandboxConfig
from sandbox.errors import (
    InternalError,
    SandboxError,
)
from sandbox.mcp.inputs import (
    validation_error,
)
from sandbox.mcp.texts import DESCRIPTIONS, INSTRUCTIONS, TITLES
from sandbox.mcp.tools import Call, ToolContext, Tools, ToolSpec
from sandbox.version import __version__

if TYPE_CHECKING:
    from sandbox.session.manager import SessionManager

log = logging.getLogger(__name__)


class _RawArguments(ArgModelBase):
    """Hands the tool body the raw arguments: our own models validate them (see module doc)."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return {"arguments": dict(self.model_extra or {})}


@dataclass(frozen=True)
class ToolOutcome:
    """A tool call's answer before the SDK's models: the engine model's dict, or the contract's
    failure ``{"error": {code, message, hint}}`` (``is_error``).

    As a ``CallToolResult`` (``result``), the same JSON is the text content too; a failure
    has no structured content: a tool with an output schema must return structured content
    that conforms to it (MCP spec), and clients check that even on errors (the TypeScript
    SDK's ``callTool`` throws -32602 otherwise), while the spec and both SDKs let an error
    carry none."""

    data: dict[str, Any]
    is_error: bool = False

    @classmethod
    def failure(cls, error: SandboxError) -> ToolOutcome:
        return cls({"error": error.to_dict()}, is_error=True)

    def text(self) -> str:
        return json.dumps(self.data, ensure_ascii=False)

    def result(self) -> CallToolResult:
        return CallToolResult(
            content=[TextContent(type="text", text=self.text())],
            structured_content=None if self.is_error else self.data,
            is_error=self.is_error,
        )


@dataclass(frozen=True)
class ToolAnswer:
    """A tool's whole call, blocking (for a worker thread): argument validation, the work, and
    the result or the contract's failure. The SDK's handler runs it through ``Tools.run``; the
    stdio fast path (``sandbox.mcp.stdio_fast``) calls ``outcome`` in its own workers."""

    spec: ToolSpec

    def __call__(self, arguments: dict[str, Any], call: Call) -> CallToolResult:
        return self.outcome(arguments, call).result()

    def outcome(self, arguments: dict[str, Any], call: Call) -> ToolOutcome:
        name, model = self.spec.name, self.spec.input_model
        try:
            try:
                args = model.model_validate(arguments)
            except ValidationError as exc:
                raise validation_error(name, model, exc) from exc
            result = self.spec.work(args, call)
        except SandboxError as exc:
            log.info("%s failed: %s: %s", name, exc.code, exc.message)
            return ToolOutcome.failure(exc)
        except ValidationError as exc:  # an engine model refused a value we passed on
            log.info("%s: engine refused arguments: %s", name, exc)
            return ToolOutcome.failure(validation_error(name, model, exc))
        except Exception as exc:
            log.exception("%s crashed", name)
            return ToolOutcome.failure(
                InternalError(f"{name} failed unexpectedly: {type(exc).__name__}: {exc}")
            )
        return ToolOutcome(result if isinstance(result, dict) else result.model_dump(mode="json"))


def make_tool(
    tools: Tools, spec: ToolSpec, description: str, schema_patch: dict[str, Any] | None = None
) -> Tool:
    """An SDK ``Tool`` whose call runs in a worker thread and fails the contract's way."""
    answer = ToolAnswer(spec)

    async def fn(arguments: dict[str, Any], ctx: ToolContext) -> CallToolResult:
        call = tools.call(ctx)
        return await tools.run(partial(answer, arguments, call), call, abandon=spec.abandon)

    parameters = spec.input_model.model_json_schema()
    for field, extra in (schema_patch or {}).items():
        parameters["properties"][field].update(extra)
    return Tool(
        fn=fn,
        name=spec.name,
        title=TITLES[spec.name],
        description=description,
        parameters=parameters,
        fn_metadata=FuncMetadata(arg_model=_RawArguments, output_model=spec.output_model),
        is_async=True,
        context_kwarg="ctx",
        annotations=spec.annotations,
    )


def build_server(
    config: SandboxConfig, manager: SessionManager | None = None, *, tools: Tools | None = None
) -> MCPServer[Any]:
    """The MCP server for ``manager`` (created, and closed when the server stops, if omitted),
    or for ``tools`` (shared with the web view, which sees what they see)."""
    return build_server_and_tools(config, manager, tools=tools)[0]


def build_server_and_tools(
    config: SandboxConfig, manager: SessionManager | None = None, *, tools: Tools | None = None
) -> tuple[MCPServer[Any], Tools]:
    """``build_server``, and the tools it serves (the stdio fast path answers with the same)."""
    owned = manager is None and tools is None
    if tools is not None:
        manager = tools.manager
    if manager is None:
        from sandbox.session.manager import SessionManager

        manager = SessionManager(config)
    tools = tools or Tools(config, manager)
    patches = {
        "execute": {
            "timeout_s": {
                "maximum": config.max_timeout_s,
                "description": (
                    f"Seconds before the command is stopped (INT, TERM, KILL). Default "
                    f"{config.default_timeout_s:g}, at most {config.max_timeout_s:g}; with "
                    "background, how long to wait for its first output (default 5)."
                ),
            }
        }
    }
    described = {
        name: text.replace("<DEFAULT_TIMEOUT>", f"{config.default_timeout_s:g}").replace(
            "<MAX_TIMEOUT>", f"{config.max_timeout_s:g}"
        )
        for name, text in DESCRIPTIONS.items()
    }
    registered = [
        make_tool(tools, s, described[s.name], patches.get(s.name)) for s in tools.specs()
    ]
    lifespan = _closing_lifespan(manager) if owned else None
    server = MCPServer(
        "sandbox",
        title="sandbox",
        instructions=INSTRUCTIONS,
        version=__version__,
        tools=registered,
        lifespan=lifespan,
        log_level="WARNING",
    )
    return server, tools


def _closing_lifespan(
    manager: SessionManager,
) -> Callable[[MCPServer[Any]], contextlib.AbstractAsyncContextManager[None]]:
    @contextlib.asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncIterator[None]:
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(manager.close)

    return lifespan


# -- transports -------------------------------------------------------------------------------
def collect_orphans(manager: SessionManager) -> None:
    """At startup: remove containers of servers that are gone, and reattach this owner's
    durable sessions (both logged to stderr); never fatal."""
    try:
        removed = manager.gc(owner=manager.config.owner)  # other owners' are not ours to judge
        adopted = manager.adopt_durable()
    except SandboxError as exc:
        log.warning("could not look for leftover containers: %s", exc.message)
        return
    for state in removed:
        log.warning(
            "removed leftover container %s (%s) of a server that is gone",
            state.name or state.id[:12],
            state.status,
        )
    if adopted:
        log.warning("reattached durable sessions: %s", ", ".join(adopted))
