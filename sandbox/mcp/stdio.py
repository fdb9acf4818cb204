"""``sandbox mcp``: the MCP server on stdin/stdout.

stdout carries only the protocol (fd 1 points at stderr while serving); logs go to stderr.
The server stops on stdin EOF, SIGINT or SIGTERM, then destroys its sessions. The wire is
read on the event loop (``sandbox.mcp.stdio_wire``), not by the SDK's worker threads: stopping
never waits for input that will not come. Tool calls take a shorter way past the SDK's dispatch
where they can (``sandbox.mcp.stdio_fast``): one thread hop each, the worker writing the answer.
"""

from __future__ import annotations

import logging
import signal
from typing import Any, cast

import anyio
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.stdio import stdio_server

from sandbox.config import SandboxConfig
from sandbox.mcp.server import build_server_and_tools, collect_orphans
from sandbox.mcp.stdio_fast import FastPath
from sandbox.mcp.stdio_wire import WireWriter, claimed_stdio, wire_lines
from sandbox.mcp.tools import Tools

log = logging.getLogger(__name__)


def serve(config: SandboxConfig) -> None:
    """Serve MCP on stdin/stdout until stdin closes, SIGINT or SIGTERM; then destroy sessions."""
    from sandbox.backends import connect
    from sandbox.session.manager import SessionManager

    manager = SessionManager(config, connect(lazy=True))  # answers without an engine
    try:
        collect_orphans(manager)
        server, tools = build_server_and_tools(config, manager)
        anyio.run(_serve_stdio, server, tools)
    finally:
        manager.close()
        log.info("stdio server stopped")


async def _serve_stdio(server: MCPServer[Any], tools: Tools) -> None:
    lowlevel = server._lowlevel_server
    with claimed_stdio() as (wire_in, wire_out):
        wire_writer = WireWriter(wire_out)
        fast = FastPath(tools, wire_writer, lambda: lowlevel.server_info_stamp)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_cancel_on_signal, tg.cancel_scope)
                lines = cast("anyio.AsyncFile[str]", wire_lines(wire_in, fast.take))
                writer = cast("anyio.AsyncFile[str]", wire_writer)
                async with stdio_server(stdin=lines, stdout=writer) as (read, write):
                    # MCPServer has no public "run on these streams"; the SDK's own in-memory
                    # transport uses the low-level server the same way.
                    await lowlevel.run(read, write, lowlevel.create_initialization_options())
                log.info("stdin closed")
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(fast.close)


async def _cancel_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.warning("%s received: stopping", signal.Signals(signum).name)
            scope.cancel()
            return
