"""``sandbox mcp``: the MCP server on stdin/stdout.

stdout carries only the protocol (the SDK points fd 1 at stderr while serving); logs go to
stderr. The server stops on stdin EOF, SIGINT or SIGTERM, then destroys its sessions. stdin is
read by a daemon thread rather than the SDK's reader, whose worker thread a signal cannot
interrupt, so stopping never waits for input that will not come.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator
from typing import Any, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
from mcp.server import MCPServer
from mcp.server.stdio import stdio_server

from sandbox.config import SandboxConfig
from sandbox.mcp_server import build_server, collect_orphans

log = logging.getLogger(__name__)


def serve(config: SandboxConfig) -> None:
    """Serve MCP on stdin/stdout until stdin closes, SIGINT or SIGTERM; then destroy sessions."""
    from sandbox.manager import SessionManager

    manager = SessionManager(config)
    try:
        collect_orphans(manager)
        server = build_server(config, manager)
        anyio.run(_serve_stdio, server)
    finally:
        manager.close()
        log.info("stdio server stopped")


async def _serve_stdio(server: MCPServer[Any]) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(_cancel_on_signal, tg.cancel_scope)
        lines = _stdin_lines(anyio.lowlevel.current_token())
        # Our own stdin reader: the SDK's blocks a worker thread that a signal cannot interrupt.
        async with stdio_server(stdin=cast("anyio.AsyncFile[str]", lines)) as (read, write):
            # MCPServer has no public "run on these streams"; the SDK's own in-memory
            # transport uses the low-level server the same way.
            lowlevel = server._lowlevel_server
            await lowlevel.run(read, write, lowlevel.create_initialization_options())
        log.info("stdin closed")
        tg.cancel_scope.cancel()


async def _cancel_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.warning("%s received: stopping", signal.Signals(signum).name)
            scope.cancel()
            return


def _stdin_lines(token: anyio.lowlevel.EventLoopToken) -> AsyncIterator[str]:
    """Lines of stdin, read by a daemon thread so that shutdown never waits for input.

    The thread reads the file descriptor directly: a daemon thread blocked inside
    ``sys.stdin.buffer`` holds its lock and aborts the interpreter at exit.
    """
    send, receive = anyio.create_memory_object_stream[str](64)
    fd = sys.stdin.fileno()

    def pump() -> None:
        pending = b""
        try:
            while chunk := os.read(fd, 65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    anyio.from_thread.run(send.send, line.decode("utf-8", "replace"), token=token)
            if pending.strip():
                anyio.from_thread.run(send.send, pending.decode("utf-8", "replace"), token=token)
        except Exception as exc:  # the loop is gone, or stdin broke
            log.debug("stdin reader stopped: %s", exc)
        finally:
            with contextlib.suppress(Exception):
                anyio.from_thread.run_sync(send.close, token=token)

    threading.Thread(target=pump, name="sandbox-stdin", daemon=True).start()
    return receive
