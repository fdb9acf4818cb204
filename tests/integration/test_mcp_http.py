"""``sandbox serve`` as a real subprocess: token, Host/Origin checks, tools over streamable HTTP.

The server binds 0.0.0.0 (with a token), so the DNS-rebinding checks are exercised on a
wildcard address. Every container carries this run's owner label and is removed by it.
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
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from sandbox.config import LABEL_OWNER
from tests.served import MCP_HEADERS, Served, initialize, start_server

pytestmark = pytest.mark.docker

OWNER = f"mcptest-{secrets.token_hex(4)}"
TOKEN = secrets.token_hex(16)
INIT = initialize("http-test")


def server_env(allowed_root: Path, state: Path, token: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("SANDBOX_TOKEN", None)
    env.pop("SANDBOX_ALLOWED_HOSTS", None)
    env.update(
        SANDBOX_OWNER=OWNER,
        SANDBOX_STATE_DIR=str(state),
        SANDBOX_ALLOWED_ROOTS=str(allowed_root),
        SANDBOX_MEMORY_MB="512",
    )
    if token is not None:
        env["SANDBOX_TOKEN"] = token
    return env


@pytest.fixture(scope="module")
def engine(docker_client: object) -> Iterator[docker.DockerClient]:
    assert isinstance(docker_client, docker.DockerClient)
    yield docker_client
    for container in docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_OWNER}={OWNER}"}
    ):
        container.remove(force=True)


@pytest.fixture(scope="module")
def served(
    engine: docker.DockerClient, allowed_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    state = tmp_path_factory.mktemp("http-state")
    served = start_server(server_env(allowed_root, state, TOKEN), host="0.0.0.0", quiet=False)
    proc = served.proc
    yield served
    proc.terminate()
    assert proc.wait(timeout=30) == 0
    leftovers = engine.containers.list(all=True, filters={"label": f"{LABEL_OWNER}={OWNER}"})
    assert leftovers == []


def post_init(served: Served, **headers: str) -> httpx.Response:
    return httpx.post(
        served.base + "/mcp", json=INIT, headers={**MCP_HEADERS, **headers}, timeout=10
    )


def test_healthz_answers_without_a_token_and_says_only_alive(served: Served) -> None:
    response = httpx.get(served.base + "/healthz", timeout=5)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_mcp_without_or_with_a_wrong_token_is_401(served: Served) -> None:
    missing = post_init(served)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert post_init(served, Authorization="Bearer wrong").status_code == 401
    assert post_init(served, Authorization=TOKEN).status_code == 401  # no scheme
    assert post_init(served, Authorization=f"Bearer {TOKEN}").status_code == 200


def test_forged_host_is_421_and_forged_origin_is_403_on_a_wildcard_bind(served: Served) -> None:
    auth = f"Bearer {TOKEN}"
    forged_host = post_init(served, Authorization=auth, Host=f"evil.example:{served.port}")
    assert forged_host.status_code == 421
    forged_origin = post_init(served, Authorization=auth, Origin="http://evil.example")
    assert forged_origin.status_code == 403
    local_origin = post_init(served, Authorization=auth, Origin=f"http://localhost:{served.port}")
    assert local_origin.status_code == 200


def test_tool_calls_work_with_the_token(served: Served, project: Path) -> None:
    async def session() -> dict[str, Any]:
        seen: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
            Client(streamable_http_client(served.base + "/mcp", http_client=http)) as client,
        ):
            with anyio.fail_after(60):
                ran = await client.call_tool(
                    "execute",
                    {
                        "project_path": str(project),
                        "command": "echo over-http; sleep 2.5; echo done",
                    },
                    progress_callback=on_progress,
                )
                assert not ran.is_error
                data = ran.structured_content
                assert data is not None
                assert json.loads(ran.content[0].text) == data  # type: ignore[union-attr]
                listed = await client.call_tool("session_list", {})
                assert listed.structured_content is not None
                gone = await client.call_tool("session_destroy", {"session_id": data["session_id"]})
                assert not gone.is_error
        return {"result": data, "listed": listed.structured_content, "progress": seen}

    out = anyio.run(session)
    assert out["result"]["output"] == "over-http\ndone\n"
    assert out["result"]["exit_code"] == 0
    assert out["listed"]["count"] == 1
    assert len(out["progress"]) >= 1


def test_python_sdk_without_the_token_is_told_to_set_the_authorization_header(
    served: Served,
) -> None:
    async def connect() -> str:
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(30)) as http:
            try:
                async with Client(streamable_http_client(served.base + "/mcp", http_client=http)):
                    return "connected"
            except Exception as exc:  # the SDK's McpError, perhaps inside an exception group
                return repr(exc)

    said = anyio.run(connect)
    assert "UNAUTHORIZED" in said
    assert "set the Authorization header" in said


def test_a_busy_port_is_one_line_naming_the_port(
    served: Served, allowed_root: Path, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sandbox", "serve", "--port", str(served.port)],
        env=server_env(allowed_root, tmp_path / "state", None),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert f"port {served.port} is already in use" in done.stderr
    assert "--port" in done.stderr
    assert "Errno" not in done.stderr


def test_binding_all_interfaces_without_a_token_is_refused(
    engine: docker.DockerClient, allowed_root: Path, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sandbox", "serve", "--host", "0.0.0.0", "--port", "1"],
        env=server_env(allowed_root, tmp_path / "state", None),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "token" in done.stderr
    assert "SANDBOX_TOKEN" in done.stderr
    assert done.stdout == ""
