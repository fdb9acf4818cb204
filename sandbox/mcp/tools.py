"""The bodies of the contract's eleven tools and ``session_update``: thin typed wrappers over
``SessionManager``.

Arguments arrive validated (``sandbox.mcp.inputs``); each blocking engine call runs in a worker
thread, never on the event loop. ``execute`` forwards the engine's progress (elapsed seconds,
latest line) as MCP progress notifications, and a client's cancellation sets the engine's
``cancel`` event so the command is stopped with the escalation ladder before the call returns.
Who may see and create what is ``sandbox.mcp.clients``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
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
    from sandbox.session.manager import SessionManager
    from sandbox.session.session import Session

log = logging.getLogger(__name__)

T = TypeVar("T")
ToolContext = Context[Any, Any]
ToolBody = Callable[[Any, ToolContext | None], Awaitable[BaseModel | dict[str, Any]]]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    body: ToolBody
    annotations: ToolAnnotations


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
        self.clients = ClientLedger(config, manager)

    # -- clients: quotas and ownership ------------------------------------------------------
    def client(self, ctx: ToolContext | None) -> str:
        return client_of(headers_of(ctx), self.config.all_tokens)

    def session(self, ctx: ToolContext | None, session_id: str) -> Session:
        """The session, if this client may use it (another token's is not found)."""
        if not self.clients.visible(self.client(ctx), session_id):
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
        return await self._run(partial(self.clients.create, self.client(ctx), args))

    async def session_list(self, args: NoInput, ctx: ToolContext | None) -> SessionList:
        listed = await self._run(self.manager.list_sessions)
        client = self.client(ctx)
        mine = [s for s in listed.sessions if self.clients.visible(client, s.session_id)]
        return SessionList(sessions=mine, count=len(mine))

    async def session_info(self, args: SessionInput, ctx: ToolContext | None) -> SessionInfo:
        self.session(ctx, args.session_id)
        return await self._run(partial(self.manager.info, args.session_id))

    async def session_destroy(
        self, args: SessionDestroyInput, ctx: ToolContext | None
    ) -> Destroyed:
        self.session(ctx, args.session_id)
        return await self._run(partial(self.manager.destroy, args.session_id, force=args.force))

    async def session_update(
        self, args: SessionUpdateInput, ctx: ToolContext | None
    ) -> SessionUpdated:
        self.session(ctx, args.session_id)
        check_client(self.config, args.network)
        allow = await self._run(partial(self.manager.update_network, args.session_id, args.network))
        return SessionUpdated(session_id=args.session_id, egress_allow=allow)

    async def server_info(self, args: NoInput, ctx: ToolContext | None) -> ServerInfo:
        return await self._run(self.manager.server_info)

    # -- execute -----------------------------------------------------------------------------
    async def execute(self, args: ExecuteInput, ctx: ToolContext | None) -> ExecResult:
        cancel = threading.Event()
        loop = anyio.lowlevel.current_token()

        def progress(elapsed: float, line: str) -> None:  # engine thread, about once a second
            if ctx is None:  # the stdio fast path: no progress token to report to
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
            ToolSpec(
                "session_update", SessionUpdateInput, SessionUpdated, self.session_update, plain
            ),
        ]
