"""``sandbox mcp`` as a real subprocess on a real engine, driven by the SDK's stdio client.

Configuration reaches the server through ``SANDBOX_*`` variables; every container carries this
run's own owner label and is removed by that label at the end.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import docker
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import CallToolResult

from sandbox.config import LABEL_OWNER, LABEL_SESSION
from tests.served import initialize

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

OWNER = f"mcptest-{secrets.token_hex(4)}"
STEP_S = 60  # bound of one tool call (creating a session included)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _containers(client: docker.DockerClient, label: str) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": label}))


@pytest.fixture(scope="module")
def engine(docker_client: object) -> Iterator[docker.DockerClient]:
    assert isinstance(docker_client, docker.DockerClient)
    yield docker_client
    for container in _containers(docker_client, f"{LABEL_OWNER}={OWNER}"):
        container.remove(force=True)


def server_env(owner: str, allowed_root: Path, state: Path) -> dict[str, str]:
    env = {
        "SANDBOX_OWNER": owner,
        "SANDBOX_STATE_DIR": str(state),
        "SANDBOX_ALLOWED_ROOTS": str(allowed_root),
        "SANDBOX_MEMORY_MB": "512",
    }
    for name in ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_CERT_PATH"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


@pytest.fixture
def params(
    engine: docker.DockerClient, allowed_root: Path, tmp_path: Path
) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "sandbox", "mcp"],
        env=server_env(OWNER, allowed_root, tmp_path / "state"),
    )


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    with anyio.fail_after(STEP_S):
        result = await client.call_tool(tool, arguments)
    return _ok(result)


def _ok(result: CallToolResult) -> dict[str, Any]:
    data = result.structured_content
    assert data is not None
    assert not result.is_error, data
    assert json.loads(result.content[0].text) == data  # type: ignore[union-attr]
    return dict(data)


async def test_an_agent_session_over_stdio(params: StdioServerParameters, project: Path) -> None:
    async with Client(params) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"session_create", "execute", "send", "read", "read_log"} <= tools
        created = await call(client, "session_create", project_path=str(project))
        sid = created["session_id"]

        # exit codes are data
        assert (await call(client, "execute", session_id=sid, command="true"))["exit_code"] == 0
        assert (await call(client, "execute", session_id=sid, command="false"))["exit_code"] == 1
        assert (await call(client, "execute", session_id=sid, command="(exit 42)"))[
            "exit_code"
        ] == 42

        # multi-line, quotes, heredoc, state that persists
        script = "cat > notes.txt <<'EOF'\nit's \"quoted\"\nEOF\ncd /workspace\nwc -l < notes.txt"
        multi = await call(client, "execute", session_id=sid, command=script)
        assert multi["output"] == "1\n"
        assert (project / "notes.txt").read_text() == 'it\'s "quoted"\n'

        # a timeout escalates (INT is ignored, so TERM follows) and the shell survives
        stubborn = "bash -c 'trap \"\" INT; echo started; sleep 60'"
        timed = await call(client, "execute", session_id=sid, command=stubborn, timeout_s=2)
        assert timed["timed_out"] is True
        assert timed["signals_sent"][:2] == ["SIGINT", "SIGTERM"]
        assert "started" in timed["output"]
        alive = await call(client, "execute", session_id=sid, command="echo alive")
        assert alive["output"] == "alive\n"

        # an interactive REPL through send and read
        started = await call(client, "send", session_id=sid, text="python3 -q\n", wait_ms=5000)
        assert started["bytes_sent"] > 0
        prompt = await call(
            client, "read", session_id=sid, view="screen", wait_for=r">>>\s*$", timeout_ms=5000
        )
        assert prompt["matched"] is True, prompt["content"]
        answer = await call(client, "send", session_id=sid, text="print(6 * 7)\n", wait_ms=5000)
        assert "42" in answer["content"]
        screen = await call(client, "read", session_id=sid, view="screen")
        assert "42" in screen["content"]
        await call(client, "send", session_id=sid, keys=["ctrl+d"])
        back = await call(
            client, "read", session_id=sid, view="screen", wait_for=r"\$\s*$", timeout_ms=5000
        )
        assert back["matched"] is True, back["content"]

        # signal stops a background job
        bg = await call(client, "execute", session_id=sid, command="sleep 600", background=True)
        assert bg["still_running"] is True
        stopped = await call(client, "signal", session_id=sid, signal="INT")
        assert stopped["stopped"] is True
        assert stopped["signals_sent"][0] == "SIGINT"

        # resize
        assert await call(client, "resize", session_id=sid, rows=40, cols=120) == {
            "rows": 40,
            "cols": 120,
        }
        size = await call(client, "execute", session_id=sid, command="stty size")
        assert size["output"] == "40 120\n"

        # long output: the tail in execute, everything through read_log pages
        many = await call(client, "execute", session_id=sid, command="seq 1 3000", max_lines=5)
        assert many["truncated"] is True
        assert many["total_lines"] == 3000
        start, end = many["log_range"]["from_byte"], many["log_range"]["to_byte"]
        text, offset, pages = "", start, 0
        while offset < end:
            page = await call(
                client,
                "read_log",
                session_id=sid,
                from_byte=offset,
                max_bytes=min(4096, end - offset),
            )
            text += page["chunk"]
            offset = page["next_byte"]
            pages += 1
        assert pages > 1
        assert text.replace("\r\n", "\n").splitlines() == [str(i) for i in range(1, 3001)]

        destroyed = await call(client, "session_destroy", session_id=sid)
        assert destroyed["destroyed"] is True
        assert (await call(client, "session_list"))["count"] == 0


async def test_progress_notifications_arrive_during_a_long_command(
    params: StdioServerParameters, project: Path
) -> None:
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    async with Client(params) as client:
        with anyio.fail_after(STEP_S):
            result = await client.call_tool(
                "execute",
                {
                    "project_path": str(project),
                    "command": "for i in 1 2 3 4 5; do echo tick$i; sleep 1; done",
                },
                progress_callback=on_progress,
            )
        assert _ok(result)["output"].split() == [f"tick{i}" for i in range(1, 6)]
    assert len(seen) >= 3
    assert [p for p, _ in seen] == sorted(p for p, _ in seen)
    assert any(m is not None and "tick" in m for _, m in seen)


async def test_cancelling_execute_returns_promptly_and_stops_the_process(
    params: StdioServerParameters, project: Path
) -> None:
    async with Client(params) as client:
        sid = (await call(client, "session_create", project_path=str(project)))["session_id"]
        with anyio.fail_after(STEP_S):
            async with anyio.create_task_group() as tg:

                async def on_progress(
                    progress: float, total: float | None, message: str | None
                ) -> None:
                    tg.cancel_scope.cancel()  # sleep 600 is running: give up on it

                async def run() -> None:
                    await client.call_tool(
                        "execute",
                        {"session_id": sid, "command": "sleep 600"},
                        progress_callback=on_progress,
                    )

                tg.start_soon(run)
        # The next execute waits for the stop to finish, then finds no sleep left.
        check = await call(
            client,
            "execute",
            session_id=sid,
            command="ps -eo args | grep -c '^sleep 600' || true",
            timeout_s=20,
        )
        assert check["output"] == "0\n"
        info = await call(client, "session_info", session_id=sid)
        assert info["busy"] is False


def test_server_exits_on_stdin_eof_and_removes_its_containers(
    engine: docker.DockerClient, allowed_root: Path, tmp_path: Path, project: Path
) -> None:
    owner = f"{OWNER}-eof"
    env = {**os.environ, **server_env(owner, allowed_root, tmp_path / "state")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox", "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None

    def rpc(message: dict[str, Any]) -> dict[str, Any] | None:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write((json.dumps(message) + "\n").encode())
        proc.stdin.flush()
        if "id" not in message:
            return None
        answer: dict[str, Any] = json.loads(proc.stdout.readline())
        return answer

    try:
        rpc(initialize("eof-test"))
        rpc({"jsonrpc": "2.0", "method": "notifications/initialized"})
        answer = rpc(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "session_create", "arguments": {"project_path": str(project)}},
            }
        )
        assert answer is not None
        sid = answer["result"]["structuredContent"]["session_id"]
        assert len(_containers(engine, f"{LABEL_SESSION}={sid}")) == 1
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        leftovers = _containers(engine, f"{LABEL_OWNER}={owner}")
        for container in leftovers:
            container.remove(force=True)
    assert leftovers == []
