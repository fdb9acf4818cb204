"""The server dies or its client goes away: nothing leaks once the next server starts."""

from __future__ import annotations

import secrets
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import docker
import httpx
import pytest

from sandbox.config import LABEL_OWNER
from tests.conftest import make_project
from tests.faults.conftest import SEC_OWNER, mcp_calls, running_server, serve_env, start_server
from tests.served import initialize

pytestmark = pytest.mark.docker


def containers_of(engine: docker.DockerClient, owner: str) -> list[str]:
    found = engine.containers.list(all=True, filters={"label": f"{LABEL_OWNER}={owner}"})
    return [c.name for c in found]


def wait_until(predicate: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_a_server_killed_mid_command_leaks_nothing_after_the_next_start(
    engine: docker.DockerClient, allowed_root: Path, tmp_path: Path
) -> None:
    owner = f"{SEC_OWNER}-kill{secrets.token_hex(2)}"
    env = serve_env(owner, tmp_path / "state", allowed_root)
    project = make_project("killed")
    first = start_server(env)
    try:
        started = mcp_calls(
            first.base,
            [
                ("session_create", {"project_path": str(project)}),
                ("session_create", {"project_path": str(project), "name": "second"}),
            ],
        )
        sid = started[0]["session_id"]
        running = mcp_calls(
            first.base,
            [("execute", {"session_id": sid, "command": "sleep 300", "background": True})],
        )
        assert running[0]["still_running"] is True
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(timeout=10)
        assert len(containers_of(engine, owner)) == 2  # the dead server's sessions remain ...
        with running_server(env) as second:  # ... until the next server starts
            assert wait_until(lambda: containers_of(engine, owner) == [], 30)
            assert httpx.get(second.base + "/healthz", timeout=5).status_code == 200
            listed = mcp_calls(second.base, [("session_list", {})])
            assert listed[0]["count"] == 0
        assert not list((tmp_path / "state" / "sessions").glob("*/raw.log"))
    finally:
        if first.proc.poll() is None:
            first.proc.kill()
        for container in engine.containers.list(
            all=True, filters={"label": f"{LABEL_OWNER}={owner}"}
        ):
            container.remove(force=True)


def test_a_client_that_disconnects_mid_execute_leaves_nothing_behind(
    engine: docker.DockerClient, allowed_root: Path, tmp_path: Path
) -> None:
    owner = f"{SEC_OWNER}-disc{secrets.token_hex(2)}"
    token = secrets.token_hex(8)
    env = serve_env(owner, tmp_path / "state", allowed_root, SANDBOX_TOKEN=token)
    project = make_project("disconnect")
    auth = {"Authorization": f"Bearer {token}"}
    headers = {**auth, "Accept": "application/json, text/event-stream"}
    with running_server(env) as served:
        sid = mcp_calls(served.base, [("session_create", {"project_path": str(project)})], token)[
            0
        ]["session_id"]
        init = httpx.post(
            served.base + "/mcp",
            json=initialize("gone"),
            headers=headers,
            timeout=10,
        )
        session_header = {"mcp-session-id": init.headers["mcp-session-id"], **headers}
        httpx.post(
            served.base + "/mcp",
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers=session_header,
            timeout=10,
        )
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {
                "name": "execute",
                "arguments": {
                    "session_id": sid,
                    "command": "sleep 4; echo finished > /workspace/marker",
                    "timeout_s": 30,
                },
                "_meta": {"progressToken": 7},
            },
        }

        def send_and_vanish() -> None:
            with (
                httpx.Client(timeout=10) as client,
                client.stream(
                    "POST", served.base + "/mcp", json=call, headers=session_header
                ) as response,
            ):
                for _ in response.iter_bytes():
                    break  # the first progress event: the command runs; then hang up

        vanish = threading.Thread(target=send_and_vanish)
        vanish.start()
        vanish.join(timeout=20)
        assert not vanish.is_alive()
        # The server lives, the session answers (the command was stopped or ran to its end)
        after = mcp_calls(
            served.base,
            [
                ("execute", {"session_id": sid, "command": "echo after", "timeout_s": 20}),
                ("session_list", {}),
            ],
            token,
        )
        assert after[0]["output"] == "after\n"
        assert after[1]["count"] == 1
        assert served.proc.poll() is None
    assert served.proc.returncode == 0
    assert containers_of(engine, owner) == []
