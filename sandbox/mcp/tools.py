"""The bodies of the contract's eleven tools and ``session_update``: thin typed wrappers over
``SessionManager``.

Arguments arrive validated (``sandbox.mcp.inputs``); each tool's work is blocking and runs whole
in a worker thread, never on the event loop (``Tools.run`` for the SDK's handlers; the stdio
fast path, ``sandbox.mcp.stdio_fast``, runs it in its own workers). ``execute`` forwards the
engine's progress (elapsed seconds, latest line) as MCP progress notifications, and a client's
cancellation sets the engine's ``cancel`` event so the command is stopped with the escalation
ladder before the call returns.
Who may see and create what is ``sandbox.mcp.clients``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp_types import ToolAnnotations
from pydantic import BaseModel

from sandbox.config import SandboxConfig
from sandbox.egress.policy import check_client
from sandbox.errors import InvalidArgumentError, SessionNotFoundError
from sandbox.mcp.clients import ClientLedger, client_of, headers_of
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
    SessionUpdateInput,
    SignalInput,
)
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
    SessionUpdated,
    SignalResult,
)

if TYPE_CHECKING:
    from sandbox.session.command_wait import ProgressFn
    from sandbox.session.manager import SessionManager
    from sandbox.session.session import Session

log = logging.getLogger(__name__)

T = TypeVar("T")
ToolContext = Context[Any, Any]


@dataclass(frozen=True)
class Call:
    """One tool call as its work sees it: who calls, where progress goes, what stops it."""

    client: str
    cancel: threading.Event = field(default_factory=threading.Event)
    progress: ProgressFn | None = None


# A tool's whole work, validated arguments in, blocking: it runs in a worker thread.
ToolWork = Callable[[Any, Call], BaseModel | dict[str, Any]]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    work: ToolWork
    annotations: ToolAnnotations
    abandon: bool = False  # a cancelled call returns at once: its work only waits and reads


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
    """The tool bodies: each is blocking work for a worker thread (``ToolWork``)."""

    def __init__(self, config: SandboxConfig, manager: SessionManager) -> None:
        self.config = config
        self.manager = manager
        self.threads = max(40, 4 * config.max_sessions)  # tool calls running at once
        self.limiter = anyio.CapacityLimiter(self.threads)
        self.clients = ClientLedger(config, manager)

    # -- clients: quotas and ownership ------------------------------------------------------
    def client(self, ctx: ToolContext | None) -> str:
        return client_of(headers_of(ctx), self.config.all_tokens)

    def call(self, ctx: ToolContext | None) -> Call:
        """On the event loop: a call of ``ctx``'s client, its progress reported to ``ctx``."""
        client = self.client(ctx)
        if ctx is None:
            return Call(client)
        loop = anyio.lowlevel.current_token()

        def progress(elapsed: float, line: str) -> None:  # engine thread, about once a second
            with contextlib.suppress(Exception):
                anyio.from_thread.run(_report_progress, ctx, elapsed, line, token=loop)

        return Call(client, progress=progress)

    async def run(self, work: Callable[[], T], call: Call, *, abandon: bool) -> T:
        """Run a tool's blocking work in a worker thread.

        Cancelling this await sets ``call.cancel`` (an execute stops with the escalation ladder)
        and waits for the work to wind down before raising, unless ``abandon``: for work that
        only waits and reads (it ends at its own timeout, or when the session closes).
        No task group and no watcher task: an execute of ``true`` is a millisecond, and those
        would cost a fifth of it.
        """
        started, finished = threading.Event(), threading.Event()

        def guarded() -> T:
            started.set()
            try:
                return work()
            finally:
                finished.set()

        try:
            return await anyio.to_thread.run_sync(
                guarded, limiter=self.limiter, abandon_on_cancel=True
            )
        except anyio.get_cancelled_exc_class():
            call.cancel.set()  # work that has not started yet returns at once when it does
            if started.is_set() and not abandon:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(finished.wait)
            raise

    def session(self, client: str, session_id: str) -> Session:
        """The session, if this client may use it (another token's is not found)."""
        if not self.clients.visible(client, session_id):
            raise SessionNotFoundError(
                f"no session {session_id!r} on this server",
                hint="Call session_list to see your sessions, or session_create to start one.",
            )
        return self.manager.get(session_id)

    def _session_for_project(self, client: str, project_path: str, name: str | None) -> str:
        """``execute`` by project: this client's running session of it, or a new one."""
        found = self.manager.find_for_project(
            project_path, name, lambda session_id: self.clients.visible(client, session_id)
        )
        if found is not None:
            return found.id
        request = CreateRequest(project_path=project_path, name=name)
        return self.clients.create(client, request).session_id

    def _max_ms(self, field: str, value: int) -> None:
        limit = int(self.config.max_timeout_s * 1000)
        if value > limit:
            raise InvalidArgumentError(
                f"{field}={value} is above the server's maximum of {limit} ms",
                hint="Wait in shorter steps: call read again with wait_for or idle_ms.",
            )

    # -- sessions ----------------------------------------------------------------------------
    def session_create(self, args: SessionCreateInput, call: Call) -> SessionCreated:
        return self.clients.create(call.client, args)

    def session_list(self, args: NoInput, call: Call) -> SessionList:
        listed = self.manager.list_sessions()
        mine = [s for s in listed.sessions if self.clients.visible(call.client, s.session_id)]
        return SessionList(sessions=mine, count=len(mine))

    def session_info(self, args: SessionInput, call: Call) -> SessionInfo:
        self.session(call.client, args.session_id)
        return self.manager.info(args.session_id)

    def session_destroy(self, args: SessionDestroyInput, call: Call) -> Destroyed:
        self.session(call.client, args.session_id)
        return self.manager.destroy(args.session_id, force=args.force)

    def session_update(self, args: SessionUpdateInput, call: Call) -> SessionUpdated:
        self.session(call.client, args.session_id)
        check_client(self.config, args.network)
        allow = self.manager.update_network(args.session_id, args.network)
        return SessionUpdated(session_id=args.session_id, egress_allow=allow)

    def server_info(self, args: NoInput, call: Call) -> ServerInfo:
        return self.manager.server_info()

    # -- execute -----------------------------------------------------------------------------
    def execute(self, args: ExecuteInput, call: Call) -> ExecResult:
        session_id = args.session_id
        if session_id is not None:
            self.session(call.client, session_id)
        elif args.project_path is not None:
            session_id = self._session_for_project(call.client, args.project_path, args.name)
        return self.manager.execute(
            args.command,
            session_id=session_id,
            project_path=args.project_path if session_id is None else None,
            name=args.name,
            timeout_s=args.timeout_s,
            idle_timeout_s=args.idle_timeout_s,
            background=args.background,
            max_lines=args.max_lines,
            strip_ansi=args.strip_ansi,
            progress=call.progress,
            cancel=call.cancel,
        )

    # -- terminal ----------------------------------------------------------------------------
    def send(self, args: SendInput, call: Call) -> dict[str, Any]:
        self._max_ms("wait_ms", args.wait_ms)
        session = self.session(call.client, args.session_id)
        text, keys = split_enter(args.text, args.keys, args.paste)
        sent = session.send(
            text=text, keys=keys, paste=args.paste, wait_ms=args.wait_ms, view=args.view
        )
        return sent.model_dump(mode="json", exclude_none=True)

    def read(self, args: ReadInput, call: Call) -> ReadResult:
        self._max_ms("timeout_ms", args.timeout_ms)
        session = self.session(call.client, args.session_id)
        return session.read(
            view=args.view,
            strip_ansi=args.strip_ansi,
            wait_for=args.wait_for,
            timeout_ms=args.timeout_ms,
            idle_ms=args.idle_ms,
            offset=args.offset,
            limit=args.limit,
        )

    def signal(self, args: SignalInput, call: Call) -> SignalResult:
        session = self.session(call.client, args.session_id)
        return session.signal(args.signal, escalate_=args.escalate)

    def resize(self, args: ResizeInput, call: Call) -> ResizeResult:
        session = self.session(call.client, args.session_id)
        return session.resize(args.rows, args.cols)

    def read_log(self, args: ReadLogInput, call: Call) -> LogChunk:
        session = self.session(call.client, args.session_id)
        # An agent never gets raw terminal strings (titles, OSC 52, DCS): see SECURITY.md.
        return session.read_log(args.from_byte, args.max_bytes, args.strip_ansi, sanitize=True)

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
            ToolSpec("send", SendInput, SendResult, self.send, plain, abandon=True),
            ToolSpec("read", ReadInput, ReadResult, self.read, read_only, abandon=True),
            ToolSpec("signal", SignalInput, SignalResult, self.signal, destructive),
            ToolSpec("resize", ResizeInput, ResizeResult, self.resize, resizing),
            ToolSpec("read_log", ReadLogInput, LogChunk, self.read_log, read_only),
            ToolSpec("server_info", NoInput, ServerInfo, self.server_info, read_only),
            ToolSpec(
                "session_update", SessionUpdateInput, SessionUpdated, self.session_update, plain
            ),
        ]
