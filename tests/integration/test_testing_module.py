"""``sandbox.testing`` used the way a user's CI would: the server image in a container.

``SandboxServerContainer`` against the real engine (a command's file appears on the host, a
ready MCP client with the token, a tool error, cleanup of the server and its sessions, a wrong
socket group corrected), and the pytest plugin's fixtures in a pytester run. The server image is
built once (``scripts/server-image.sh``) when it is missing. Every server and session carries a
``teamtest-<random>`` owner label and is removed by it at the end.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import anyio
import docker
import docker.errors
import httpx
import pytest

import sandbox
import sandbox.testing
import sandbox.testing.server
from sandbox.config import LABEL_OWNER
from sandbox.testing import SandboxServerContainer, SandboxToolError
from tests.integration.conftest import ensure_server_image

# Not in the Podman tier: the server image is built by Docker and run with Docker's socket mounted.
pytestmark = [pytest.mark.docker, pytest.mark.docker_only]
pytest_plugins = ("pytester",)

REPO = Path(__file__).resolve().parents[2]
IMAGE = sandbox.testing.DEFAULT_SERVER_IMAGE
RUN = secrets.token_hex(4)


def owner(tag: str) -> str:
    return f"teamtest-{RUN}-{tag}"


def leftovers(client: docker.DockerClient, label: str) -> list[str]:
    found = client.containers.list(all=True, filters={"label": f"{LABEL_OWNER}={label}"})
    for container in found:
        container.remove(force=True)
    return [c.name for c in found]


@pytest.fixture(scope="module")
def engine(docker_client: object) -> Iterator[docker.DockerClient]:
    assert isinstance(docker_client, docker.DockerClient)
    ensure_server_image(docker_client, IMAGE)
    yield docker_client
    left = [
        c.name
        for c in docker_client.containers.list(all=True, filters={"label": LABEL_OWNER})
        if c.labels.get(LABEL_OWNER, "").startswith(f"teamtest-{RUN}")
    ]
    for name in left:
        docker_client.containers.get(name).remove(force=True)
    assert left == [], f"containers left behind: {left}"


@pytest.fixture(scope="module")
def server(engine: docker.DockerClient) -> Iterator[SandboxServerContainer]:
    with SandboxServerContainer(owner=owner("module")) as started:
        yield started


def test_a_command_runs_in_a_project_and_its_file_is_on_the_host(
    server: SandboxServerContainer,
) -> None:
    project = server.make_project("files")
    (project / "data.txt").write_text("41\n")
    created = server.call("session_create", {"project_path": str(project)})
    try:
        result = server.call(
            "execute",
            {
                "session_id": created["session_id"],
                "command": "echo $(( $(cat data.txt) + 1 )) | tee answer.txt",
            },
        )
        assert result["exit_code"] == 0
        assert result["output"] == "42\n"
        assert (project / "answer.txt").read_text() == "42\n"
    finally:
        server.call("session_destroy", {"session_id": created["session_id"], "force": True})


def test_client_is_a_ready_mcp_session_that_needs_the_token(
    server: SandboxServerContainer,
) -> None:
    async def scenario() -> tuple[list[str], dict[str, object]]:
        async with server.client() as client:
            tools = await client.list_tools()
            info = await client.call_tool("server_info", {})
            return [tool.name for tool in tools.tools], info.structured_content

    names, info = anyio.run(scenario)
    assert {"execute", "session_create", "server_info"} <= set(names)
    assert info["version"] == sandbox.__version__
    assert server.url.endswith("/mcp")
    assert httpx.get(server.base_url + "/healthz", timeout=5).status_code == 200
    refused = httpx.post(server.url, json={}, timeout=5)
    assert refused.status_code == 401


def test_a_tool_error_raises_with_the_contract_code(server: SandboxServerContainer) -> None:
    with pytest.raises(SandboxToolError) as caught:
        server.call("execute", {"project_path": "/etc", "command": "true"})
    assert caught.value.code == "PATH_NOT_ALLOWED"
    assert caught.value.hint


def test_stop_removes_the_server_and_its_sessions(engine: docker.DockerClient) -> None:
    label = owner("stop")
    container = SandboxServerContainer(owner=label).start()
    try:
        project = container.make_project()
        container.call("execute", {"project_path": str(project), "command": "true"})
        sessions = engine.containers.list(filters={"label": f"{LABEL_OWNER}={label}"})
        assert len(sessions) == 2  # the server and the session it made
        projects_dir = container.projects_dir
    finally:
        container.stop()
    assert leftovers(engine, label) == []
    assert not projects_dir.exists()


def test_a_wrong_socket_group_is_corrected_from_the_entrypoint_message(
    engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(sandbox.testing.server.GID_ENV, raising=False)
    sock = Path("/var/run/docker.sock")
    real = sock.stat().st_gid if sock.exists() else 0
    if real == 0:
        pytest.skip("the engine socket belongs to group 0: no wrong group to start with")
    monkeypatch.setattr(sandbox.testing.server, "_local_gid", lambda socket: 0)
    label = owner("gid")
    with SandboxServerContainer(owner=label) as server:
        assert server.call("session_list")["count"] == 0
        groups = server.get_wrapped_container().attrs["HostConfig"]["GroupAdd"]
        assert groups == [str(real)]
    assert leftovers(engine, label) == []


PLUGIN_TEST = """
def test_session_runs_commands_in_its_project(sandbox_session):
    (sandbox_session.project / "in.txt").write_text("hello\\n")
    result = sandbox_session.execute("tr a-z A-Z < in.txt > out.txt; cat out.txt; (exit 3)")
    assert result["exit_code"] == 3
    assert result["output"] == "HELLO\\n"
    assert (sandbox_session.project / "out.txt").read_text() == "HELLO\\n"


def test_server_is_shared_and_lists_the_session(sandbox_server, sandbox_session):
    listed = sandbox_server.call("session_list")
    assert sandbox_session.session_id in [s["session_id"] for s in listed["sessions"]]
"""


def test_pytest_plugin_fixtures_give_a_server_and_fresh_sessions(
    engine: docker.DockerClient, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    label = owner("plugin")
    monkeypatch.setenv(sandbox.testing.server.OWNER_ENV, label)
    pytester.makepyfile(test_user=PLUGIN_TEST)
    result = pytester.runpytest_subprocess("-p", "sandbox.testing", "-q", timeout=180)
    result.assert_outcomes(passed=2)
    assert leftovers(engine, label) == []
