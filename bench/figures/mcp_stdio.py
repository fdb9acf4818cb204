"""execute ``true`` through MCP over stdio: ``python -m sandbox mcp`` driven by the SDK's client.

The server is a subprocess started with the SDK's stdio transport, configured through its
environment (this run's owner label, state dir and allowed roots). One session is created and
``execute`` is called ~100 times. ``session_list`` round trips show what the transport and the
SDK cost without the engine, and the same ``execute`` calls from a bare newline-JSON client
(no SDK) show the server's own share, every ten of them followed by ten Python API ``execute``
calls in this process (the floor that row is compared with: the same engine work, under the
same load). Targets:
p50 <= 5 ms, and >= 20x faster than ``docker exec`` (CLI). When the server does not work (yet),
the figure is recorded as skipped with the reason.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from bench.context import Context, FigureSkipped
from bench.figures.common import docker_exec_cli_row, open_session, timed_execute
from bench.stats import Row, compare, judge

REPO = Path(__file__).resolve().parents[2]
TARGET = "p50 <= 5 ms, >= 20x CLI"
BLOCK = 10  # raw-client calls between two runs of the interleaved floor


def run(ctx: Context) -> None:
    n = ctx.size(100, 5)
    warmup = ctx.size(10, 2)
    ctx.params.update(samples=n, warmup=warmup)
    cli = docker_exec_cli_row(ctx)
    env = ctx.env
    server_env = {
        "SANDBOX_OWNER": env.owner,
        "SANDBOX_STATE_DIR": str(env.state_dir()),
        "SANDBOX_ALLOWED_ROOTS": str(env.base),
        **{k: v for k, v in os.environ.items() if k.startswith("DOCKER_")},
    }
    project = env.project("mcp")
    ctx.log(f"spawning {sys.executable} -m sandbox mcp; {n} execute calls")
    try:
        samples, listing, spawn_ms = anyio.run(_drive, server_env, str(project), n, warmup)
    except Exception as exc:  # the server is being written: record why and go on
        reason = f"{type(exc).__name__}: {exc}".strip()
        for sub in getattr(exc, "exceptions", ()):  # exception groups from the task groups
            reason += f" | {type(sub).__name__}: {sub}"
        ctx.add(
            Row(ctx.figure, "execute `true` (MCP stdio)", "ms", target=TARGET, skipped=reason[:300])
        )
        raise FigureSkipped(reason) from exc
    ctx.add(
        Row(ctx.figure, "spawn + initialize + session_create", "ms", role="info", value=spawn_ms)
    )
    ctx.add(
        Row(ctx.figure, "MCP `session_list` (no engine work)", "ms", role="info", samples=listing)
    )
    ctx.log(f"the same over raw JSON-RPC lines (no client SDK), {n} calls, in turn with the API")
    try:
        with env.manager() as manager:
            session = open_session(manager, env.project("mcp-api"))
            raw, api = _raw_jsonrpc(
                server_env, str(project), n, warmup, lambda: timed_execute(session, "true")
            )
        f = ctx.add(
            Row(
                ctx.figure,
                "execute `true` (Python API), interleaved",
                "ms",
                role="floor",
                samples=api,
                note="the same engine work in this process, in turn with the raw client's calls",
            )
        )
        compare(
            ctx.add(
                Row(
                    ctx.figure,
                    "execute `true`, raw JSON-RPC client",
                    "ms",
                    role="info",
                    samples=raw,
                    note="the server's share: same server, a client that only writes and reads "
                    "lines",
                )
            ),
            f,
        )
    except Exception as exc:
        ctx.add(
            Row(
                ctx.figure,
                "execute `true`, raw JSON-RPC client",
                "ms",
                role="info",
                skipped=f"{type(exc).__name__}: {exc}"[:300],
            )
        )
    r = ctx.add(Row(ctx.figure, "execute `true` (MCP stdio)", "ms", samples=samples))
    compare(r, cli)
    p50 = r.median or 0.0
    faster = (cli.median or 0.0) / p50 if p50 else 0.0
    r.note = f"docker exec CLI is {faster:.1f}x slower than this (target >= 20x)"
    judge(r, TARGET, p50 <= 5.0 and faster >= 20)


async def _drive(
    server_env: dict[str, str], project: str, n: int, warmup: int
) -> tuple[list[float], list[float], float]:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "sandbox", "mcp"], env=server_env, cwd=str(REPO)
    )
    t0 = time.perf_counter()
    with anyio.fail_after(120):
        async with Client(params, cache=None, read_timeout_seconds=60) as client:
            created = _data(await client.call_tool("session_create", {"project_path": project}))
            spawn_ms = (time.perf_counter() - t0) * 1000
            sid = created["session_id"]
            execute_ms: list[float] = []
            for i in range(warmup + n):
                t = time.perf_counter()
                result = _data(
                    await client.call_tool("execute", {"session_id": sid, "command": "true"})
                )
                ms = (time.perf_counter() - t) * 1000
                if result.get("exit_code") != 0:
                    raise RuntimeError(f"execute returned {result}")
                if i >= warmup:
                    execute_ms.append(ms)
            listing_ms: list[float] = []
            for i in range(warmup + n):
                t = time.perf_counter()
                _data(await client.call_tool("session_list", {}))
                if i >= warmup:
                    listing_ms.append((time.perf_counter() - t) * 1000)
            _data(await client.call_tool("session_destroy", {"session_id": sid, "force": True}))
    return execute_ms, listing_ms, spawn_ms


def _raw_jsonrpc(
    server_env: dict[str, str], project: str, n: int, warmup: int, floor: Callable[[], float]
) -> tuple[list[float], list[float]]:
    """execute ``true`` times (ms) with a minimal newline-delimited JSON-RPC client, and as many
    ``floor()`` times after each ``BLOCK`` of calls (the machine's load hits both alike, and the
    calls stay back to back: a call right after other work finds the server's threads asleep)."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")} | server_env
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox", "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=REPO,
        bufsize=0,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    # Unbuffered, readline() reads a reply one byte per system call: ~0.9 ms a call, which
    # this row used to count as the server's.
    stdin, stdout = proc.stdin, io.BufferedReader(proc.stdout)
    ids = iter(range(1, 1 << 30))

    def call(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        ident = next(ids)
        msg = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params or {}}
        stdin.write(json.dumps(msg).encode() + b"\n")
        while True:
            line = stdout.readline()
            if not line:
                raise EOFError("the server closed its stdout")
            reply = json.loads(line)
            if reply.get("id") == ident:
                if "error" in reply or reply["result"].get("isError"):
                    raise RuntimeError(f"{method}: {reply}")
                result: dict[str, Any] = reply["result"]
                return result

    try:
        call(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        )
        stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        created = call(
            "tools/call", {"name": "session_create", "arguments": {"project_path": project}}
        )
        sid = created["structuredContent"]["session_id"]
        args = {"name": "execute", "arguments": {"session_id": sid, "command": "true"}}
        out: list[float] = []
        floors: list[float] = []
        for i in range(warmup + n):
            t0 = time.perf_counter()
            call("tools/call", args)
            if i >= warmup:
                out.append((time.perf_counter() - t0) * 1000)
            if len(out) % BLOCK == 0 or i == warmup + n - 1:  # back-to-back, in blocks
                floors.extend(floor() for _ in range(len(out) - len(floors)))
        call("tools/call", {"name": "session_destroy", "arguments": {"session_id": sid}})
        return out, floors
    finally:
        stdin.close()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _data(result: Any) -> dict[str, Any]:
    """The structured content of a tool result; an error result raises."""
    data = result.structured_content
    if data is None and result.content:
        data = json.loads(result.content[0].text)
    if result.is_error or not isinstance(data, dict):
        raise RuntimeError(f"tool error: {data or result}")
    return data
