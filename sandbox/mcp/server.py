"""The MCP server: the contract's eleven tools as thin typed wrappers over ``SessionManager``.

``build_server(config, manager)`` returns an ``MCPServer``; ``sandbox.mcp.stdio`` serves it
on stdin/stdout (``sandbox mcp``) and ``sandbox.mcp.http`` over streamable HTTP (``sandbox
serve``); neither is imported here. Tool texts live in ``sandbox.mcp.texts``. Each tool:

* validates its arguments itself (``sandbox.mcp.inputs``), so a bad one becomes the contract's
  ``INVALID_ARGUMENT`` result naming the field instead of the SDK's plain-text error;
* runs the blocking engine call in a worker thread, never on the event loop;
* returns the engine model's dict as structured content plus the same JSON as text, or
  ``isError`` with ``{"error": {"code", "message", "hint"}}``.

``execute`` forwards the engine's progress (elapsed seconds, latest line) as MCP progress
notifications, and a client's cancellation sets the engine's ``cancel`` event so the command
is stopped with the escalation ladder before the call returns.

Over HTTP each bearer token is a client (``client_of``): it may hold at most
``SandboxConfig.token_quota`` sessions at once (``SESSION_LIMIT`` beyond), and it sees and
drives only its own sessions (another token's are ``SESSION_NOT_FOUND``). On stdio there is one
local client and only the server's ``max_sessions`` applies.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, ValidationError

from sandbox.config import SandboxConfig
from sandbox.errors import (
    InternalError,
    InvalidArgumentError,
    SandboxError,
    SessionLimitError,
    SessionNotFoundError,
)
from sandbox.mcp.http_auth import bearer_token
from sandbox.mcp.inputs import (
    ExecuteInput,
    NoInput,
    ReadInput,
    ReadLogInput,
    ResizeInput,
    SendInput,
    SessionCreateInput,
    SessionDestroyInput,
    SessionInput,
    SignalInput,
    validation_error,
)
from sandbox.mcp.texts import DESCRIPTIONS, INSTRUCTIONS, TITLES
from sandbox.models import (
    CreateRequest,
    Destroyed,
    ExecResult,
    LogChunk,
    ReadResult,
    ResizeResult,
    SendResult,
    ServerInfo,
    SessionCreated,
    SessionInfo,
    SessionList,
    SignalResult,
)
from sandbox.version import __version__

if TYPE_CHECKING:
    from sandbox.session.manager import SessionManager
    from sandbox.session.session import Session

log = logging.getLogger(__name__)

T = TypeVar("T")
ToolContext = Context[Any, Any]
ToolBody = Callable[[Any, ToolContext | None], Awaitable[BaseModel | dict[str, Any]]]
ToolRunner = Callable[[dict[str, Any], ToolContext | None], Awaitable[CallToolResult]]

POLL_S = 0.01
LOCAL_CLIENT = "local"  # stdio, in-memory: the one client of this server
ANONYMOUS_CLIENT = "anonymous"  # HTTP without a configured token (loopback only)


def client_of(headers: Mapping[str, str] | None, tokens: Sequence[str]) -> str:
    """Who is calling: a token's client id over HTTP (the guard already checked the token),
    ``"anonymous"`` over HTTP without tokens, ``"local"`` on stdio."""
    if headers is None:
        return LOCAL_CLIENT
    given = bearer_token(headers.get("authorization"))
    if given and given in tokens:
        return "token-" + hashlib.sha256(given.encode()).hexdigest()[:12]
    return ANONYMOUS_CLIENT


def _headers(ctx: ToolContext | None) -> Mapping[str, str] | None:
    if ctx is None:  # the stdio fast path: the local client
        return None
    try:
        return ctx.headers
    except ValueError:  # outside a request
        return None


class _RawArguments(ArgModelBase):
    """Hands the tool body the raw arguments: our own models validate them (see module doc)."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return {"arguments": dict(self.model_extra or {})}


def error_result(error: SandboxError) -> CallToolResult:
    """The contract's failure: ``isError`` with ``{"error": {code, message, hint}}`` as text.

    No structured content: a tool with an output schema must return structured content that
    conforms to it (MCP spec), and clients check that even on errors (the TypeScript SDK's
    ``callTool`` throws -32602 otherwise), while the spec and both SDKs let an error carry none."""
    data = {"error": error.to_dict()}
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data, ensure_ascii=False))],
        is_error=True,
    )


def ok_result(data: dict[str, Any]) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data, ensure_ascii=False))],
        structured_content=data,
    )


@dataclass(frozen=True)
class ToolSpec:
    name: str
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    body: ToolBody
    annotations: ToolAnnotations


def tool_runner(spec: ToolSpec) -> ToolRunner:
    """The tool's body behind argument validation, failing the contract's way (no context:
    the stdio fast path, ``sandbox.mcp.stdio_fast``)."""
    name, model = spec.name, spec.input_model

    async def handler(arguments: dict[str, Any], ctx: ToolContext | None) -> CallToolResult:
        try:
            try:
                args = model.model_validate(arguments)
            except ValidationError as exc:
                raise validation_error(name, model, exc) from exc
            result = await spec.body(args, ctx)
        except SandboxError as exc:
            log.info("%s failed: %s: %s", name, exc.code, exc.message)
            return error_result(exc)
        except ValidationError as exc:  # an engine model refused a value we passed on
            log.info("%s: engine refused arguments: %s", name, exc)
            return error_result(validation_error(name, model, exc))
        except Exception as exc:
            log.exception("%s crashed", name)
            return error_result(
                InternalError(f"{name} failed unexpectedly: {type(exc).__name__}: {exc}")
            )
        data = result if isinstance(result, dict) else result.model_dump(mode="json")
        return ok_result(data)

    return handler


def make_tool(spec: ToolSpec, description: str, schema_patch: dict[str, Any] | None = None) -> Tool:
    """An SDK ``Tool`` whose body gets validated arguments and fails the contract's way."""
    handler = tool_runner(spec)

    async def fn(arguments: dict[str, Any], ctx: ToolContext) -> CallToolResult:
        return await handler(arguments, ctx)

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


def split_enter(
    text: str | None, keys: list[str] | None, paste: bool | str
) -> tuple[str | None, list[str] | None]:
    """With ``paste=True``, trailing newlines of ``text`` become Enter keys after the paste.

    Inside a bracketed paste readline inserts a newline instead of running the line, so a
    pasted ``"ls\\n"`` would wait for an Enter that never comes. (``paste="auto"`` already
    sends trailing newlines after the paste: ``keys.encode_text``.)
    """
    if not text or paste is not True:
        return text, keys
    body = text.rstrip("\r\n")
    enters = text[len(body) :].count("\n") or (1 if text.endswith("\r") else 0)
    if not enters:
        return text, keys
    return body or None, ["enter"] * enters + list(keys or [])


PROGRESS_SEND_S = 0.25  # a client that does not read holds an execute's wait no longer than this


async def _report_progress(ctx: ToolContext, elapsed: float, line: str) -> None:
    message = f"{elapsed:.0f} s" + (f": {line}" if line else "")
    with anyio.move_on_after(PROGRESS_SEND_S):
        try:
            await ctx.report_progress(round(elapsed, 1), None, message)
        except Exception as exc:  # the client went away: keep running
            log.debug("progress notification failed: %s", exc)


class Tools:
    """The tool bodies. Arguments arrive validated; engine calls run in worker threads."""

    def __init__(self, config: SandboxConfig, manager: SessionManager) -> None:
        self.config = config
        self.manager = manager
        self.limiter = anyio.CapacityLimiter(max(40, 4 * config.max_sessions))
        self._owners: dict[str, str] = {}  # session id -> client that created it
        self._reserved: dict[str, int] = {}  # client -> creations in flight
        self._quota_lock = threading.Lock()

    # -- clients: quotas and ownership ------------------------------------------------------
    def client(self, ctx: ToolContext | None) -> str:
        return client_of(_headers(ctx), self.config.all_tokens)

    def _visible(self, client: str, session_id: str) -> bool:
        owner = self._owners.get(session_id)
        return client == LOCAL_CLIENT or owner is None or owner == client

    def session(self, ctx: ToolContext | None, session_id: str) -> Session:
        """The session, if this client may use it (another token's is not found)."""
        if not self._visible(self.client(ctx), session_id):
            raise SessionNotFoundError(
                f"no session {session_id!r} on this server",
                hint="Call session_list to see your sessions, or session_create to start one.",
            )
        return self.manager.get(session_id)

    def _create(self, client: str, request: CreateRequest) -> SessionCreated:
        """Create a session within the client's quota (tokens only)."""
        if request.network and not self.config.client_network:
            raise InvalidArgumentError(
                "this server does not let clients turn the network on",
                hint="Omit network (sessions have none); the operator sets SANDBOX_CLIENT_NETWORK.",
            )
        quota = self.config.token_quota
        with self._quota_lock:
            live = {s.id for s in self.manager.sessions()}
            for sid in [sid for sid in self._owners if sid not in live]:
                del self._owners[sid]
            if client != LOCAL_CLIENT:
                held = sum(1 for owner in self._owners.values() if owner == client)
                if held + self._reserved.get(client, 0) >= quota:
                    raise SessionLimitError(
                        f"this client holds {held} sessions; its quota is {quota}",
                        hint="Destroy a session you no longer need (session_list shows yours); "
                        "the operator sets SANDBOX_MAX_SESSIONS_PER_TOKEN.",
                    )
            self._reserved[client] = self._reserved.get(client, 0) + 1
        try:
            created = self.manager.create(request)
            with self._quota_lock:
                self._owners[created.session_id] = client
            return created
        finally:
            with self._quota_lock:
                self._reserved[client] -= 1

    def _session_for_project(self, client: str, project_path: str, name: str | None) -> str:
        """``execute`` by project: this client's running session of it, or a new one."""
        found = self.manager.find_for_project(
            project_path, name, lambda session_id: self._visible(client, session_id)
        )
        if found is not None:
            return found.id
        return self._create(client, CreateRequest(project_path=project_path, name=name)).session_id

    async def _run(self, fn: Callable[[], T], *, abandon: bool = False) -> T:
        """Run a blocking engine call in a worker thread.

        A cancelled call waits for the thread to finish, unless ``abandon``: for calls that
        only wait and read (they end at their own timeout, or when the session closes).
        """
        return await anyio.to_thread.run_sync(fn, limiter=self.limiter, abandon_on_cancel=abandon)

    def _max_ms(self, field: str, value: int) -> None:
        limit = int(self.config.max_timeout_s * 1000)
        if value > limit:
            raise InvalidArgumentError(
                f"{field}={value} is above the server's maximum of {limit} ms",
                hint="Wait in shorter steps: call read again with wait_for or idle_ms.",
            )

    # -- sessions ----------------------------------------------------------------------------
    async def session_create(
        self, args: SessionCreateInput, ctx: ToolContext | None
    ) -> SessionCreated:
        return await self._run(partial(self._create, self.client(ctx), args))

    async def session_list(self, args: NoInput, ctx: ToolContext | None) -> SessionList:
        listed = await self._run(self.manager.list_sessions)
        client = self.client(ctx)
        mine = [s for s in listed.sessions if self._visible(client, s.session_id)]
        return SessionList(sessions=mine, count=len(mine))

    async def session_info(self, args: SessionInput, ctx: ToolContext | None) -> SessionInfo:
        self.session(ctx, args.session_id)
        return await self._run(partial(self.manager.info, args.session_id))

    async def session_destroy(
        self, args: SessionDestroyInput, ctx: ToolContext | None
    ) -> Destroyed:
        self.session(ctx, args.session_id)
        return await self._run(partial(self.manager.destroy, args.session_id, force=args.force))

    async def server_info(self, args: NoInput, ctx: ToolContext | None) -> ServerInfo:
        return await self._run(self.manager.server_info)

    # -- execute -----------------------------------------------------------------------------
    async def execute(self, args: ExecuteInput, ctx: ToolContext | None) -> ExecResult:
        cancel = threading.Event()
        loop = anyio.lowlevel.current_token()

        def progress(elapsed: float, line: str) -> None:  # engine thread, about once a second
            if ctx is None:  # no progress token: nothing to report to
                return
            with contextlib.suppress(Exception):
                anyio.from_thread.run(_report_progress, ctx, elapsed, line, token=loop)

        client = self.client(ctx)
        session_id = args.session_id
        if session_id is not None:
            self.session(ctx, session_id)
        elif args.project_path is not None:
            session_id = await self._run(
                partial(self._session_for_project, client, args.project_path, args.name)
            )
        run = partial(
            self.manager.execute,
            args.command,
            session_id=session_id,
            project_path=args.project_path if session_id is None else None,
            name=args.name,
            timeout_s=args.timeout_s,
            idle_timeout_s=args.idle_timeout_s,
            background=args.background,
            max_lines=args.max_lines,
            strip_ansi=args.strip_ansi,
            progress=progress,
            cancel=cancel,
        )
        return await self._run_cancellable(run, cancel)

    async def _run_cancellable(self, fn: Callable[[], T], cancel: threading.Event) -> T:
        """``_run`` for a call that stops early when ``cancel`` is set: cancelling this await
        sets it, then waits for the call to wind down (the escalation ladder) before raising.

        No task group and no watcher task: an execute of ``true`` is a millisecond, and those
        would cost a fifth of it.
        """
        started, finished = threading.Event(), threading.Event()

        def work() -> T:
            started.set()
            try:
                return fn()
            finally:
                finished.set()

        try:
            return await anyio.to_thread.run_sync(
                work, limiter=self.limiter, abandon_on_cancel=True
            )
        except anyio.get_cancelled_exc_class():
            cancel.set()  # a call that has not started yet returns at once when it does
            if started.is_set():
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(finished.wait)
            raise

    # -- terminal ----------------------------------------------------------------------------
    async def send(self, args: SendInput, ctx: ToolContext | None) -> dict[str, Any]:
        self._max_ms("wait_ms", args.wait_ms)
        session = self.session(ctx, args.session_id)
        return await self._run(partial(self._send, session, args), abandon=True)

    def _send(self, session: Session, args: SendInput) -> dict[str, Any]:
        text, keys = split_enter(args.text, args.keys, args.paste)
        sent = session.send(
            text=text, keys=keys, paste=args.paste, wait_ms=args.wait_ms, view=args.view
        )
        return sent.model_dump(mode="json", exclude_none=True)

    async def read(self, args: ReadInput, ctx: ToolContext | None) -> ReadResult:
        self._max_ms("timeout_ms", args.timeout_ms)
        session = self.session(ctx, args.session_id)
        return await self._run(
            partial(
                session.read,
                view=args.view,
                strip_ansi=args.strip_ansi,
                wait_for=args.wait_for,
                timeout_ms=args.timeout_ms,
                idle_ms=args.idle_ms,
                offset=args.offset,
                limit=args.limit,
            ),
            abandon=True,
        )

    async def signal(self, args: SignalInput, ctx: ToolContext | None) -> SignalResult:
        session = self.session(ctx, args.session_id)
        return await self._run(partial(session.signal, args.signal, escalate_=args.escalate))

    async def resize(self, args: ResizeInput, ctx: ToolContext | None) -> ResizeResult:
        session = self.session(ctx, args.session_id)
        return await self._run(partial(session.resize, args.rows, args.cols))

    async def read_log(self, args: ReadLogInput, ctx: ToolContext | None) -> LogChunk:
        session = self.session(ctx, args.session_id)
        # An agent never gets raw terminal strings (titles, OSC 52, DCS): see SECURITY.md.
        return await self._run(
            partial(
                session.read_log, args.from_byte, args.max_bytes, args.strip_ansi, sanitize=True
            )
        )

    def specs(self) -> list[ToolSpec]:
        read_only = ToolAnnotations(read_only_hint=True)
        destructive = ToolAnnotations(read_only_hint=False, destructive_hint=True)
        plain = ToolAnnotations(read_only_hint=False)
        resizing = ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True
        )
        return [
            ToolSpec(
                "session_create", SessionCreateInput, SessionCreated, self.session_create, plain
            ),
            ToolSpec("session_list", NoInput, SessionList, self.session_list, read_only),
            ToolSpec("session_info", SessionInput, SessionInfo, self.session_info, read_only),
            ToolSpec(
                "session_destroy", SessionDestroyInput, Destroyed, self.session_destroy, destructive
            ),
            ToolSpec("execute", ExecuteInput, ExecResult, self.execute, plain),
            ToolSpec("send", SendInput, SendResult, self.send, plain),
            ToolSpec("read", ReadInput, ReadResult, self.read, read_only),
            ToolSpec("signal", SignalInput, SignalResult, self.signal, destructive),
            ToolSpec("resize", ResizeInput, ResizeResult, self.resize, resizing),
            ToolSpec("read_log", ReadLogInput, LogChunk, self.read_log, read_only),
            ToolSpec("server_info", NoInput, ServerInfo, self.server_info, read_only),
        ]


def build_server(config: SandboxConfig, manager: SessionManager | None = None) -> MCPServer[Any]:
    """The MCP server for ``manager`` (created, and closed when the server stops, if omitted)."""
    return build_server_and_runners(config, manager)[0]


def build_server_and_runners(
    config: SandboxConfig, manager: SessionManager | None = None
) -> tuple[MCPServer[Any], dict[str, ToolRunner]]:
    """``build_server``, and each tool's runner over the same state (the stdio fast path)."""
    owned = manager is None
    if manager is None:
        from sandbox.session.manager import SessionManager

        manager = SessionManager(config)
    tools = Tools(config, manager)
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
    specs = tools.specs()
    registered = [make_tool(s, described[s.name], patches.get(s.name)) for s in specs]
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
    return server, {s.name: tool_runner(s) for s in specs}


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
