"""The server as real clients meet it: the official TypeScript SDK client and the MCP Inspector.

Agent hosts and the Inspector are built on the TypeScript SDK, whose ``callTool`` validates every
structured result against the tool's output schema, error results included; a result of the
wrong shape throws there and the model never sees our error. ``conformance.mjs`` drives every
tool, every error code of the contract, progress notifications, a client-side cancellation and
``resetTimeoutOnProgress``, over stdio and over streamable HTTP with the token. The node modules
come from ``package-lock.json`` (``npm ci``, run by ``scripts/setup.sh``). With
SANDBOX_REQUIRE_DOCKER=1 a missing node or node_modules fails instead of skipping.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from sandbox.config import LABEL_OWNER
from tests.conftest import make_project
from tests.integration.conftest import RUN_OWNER

pytestmark = pytest.mark.docker

HERE = Path(__file__).resolve().parent
OWNER = f"{RUN_OWNER}-ts"


@pytest.fixture(scope="module")
def node() -> str:
    found = shutil.which("node")
    missing = (
        "node is not installed"
        if found is None
        else "tests/conformance/node_modules is missing (run `npm ci` there, or scripts/setup.sh)"
        if not (HERE / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir()
        else None
    )
    if missing is not None:
        if os.environ.get("SANDBOX_REQUIRE_DOCKER") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    assert found is not None
    return found


@pytest.fixture(scope="module")
def server_env(
    docker_client: object, allowed_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    assert isinstance(docker_client, docker.DockerClient)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_")}
    env.update(
        SANDBOX_OWNER=OWNER,
        SANDBOX_STATE_DIR=str(tmp_path_factory.mktemp("ts-state")),
        SANDBOX_ALLOWED_ROOTS=str(allowed_root),
        SANDBOX_MEMORY_MB="512",
        SANDBOX_PYTHON=sys.executable,
        CONFORMANCE_PROJECT=str(make_project("ts")),
    )
    yield env
    leaked = docker_client.containers.list(all=True, filters={"label": f"{LABEL_OWNER}={OWNER}"})
    for container in leaked:
        container.remove(force=True)
    assert not leaked, f"containers left behind: {[c.name for c in leaked]}"


def _node(node: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [node, *args],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_typescript_sdk_client_drives_every_tool_and_error(
    node: str, server_env: dict[str, str], transport: str
) -> None:
    done = _node(node, server_env, "conformance.mjs", transport)
    checks = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    failed = [c for c in checks if c.get("ok") is False]
    assert done.returncode == 0, (failed, done.stderr[-3000:])
    assert {"done": transport} == {k: v for k, v in checks[-1].items() if k == "done"}
    names = {c["check"] for c in checks if "check" in c}
    for code in (
        "INVALID_ARGUMENT",
        "PATH_NOT_ALLOWED",
        "SESSION_NOT_FOUND",
        "SESSION_LIMIT",
        "SESSION_EXITED",
        "SESSION_BUSY",
        "ENGINE_UNAVAILABLE",
        "IMAGE_NOT_FOUND",
    ):
        assert f"{code} carries no structured content" in names, code
    assert "execute sends progress notifications" in names
    assert "resetTimeoutOnProgress keeps a long execute alive" in names
    assert "the cancelled command was stopped and the session is free" in names


def _inspector(node: str, env: dict[str, str], *method: str) -> str:
    argv = ["npx", "--no-install", "@modelcontextprotocol/inspector", "--cli"]  # the local one
    done = subprocess.run(
        [*argv, sys.executable, "-m", "sandbox", "mcp", "--method", *method],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.stdout.strip(), done.stderr[-2000:]
    return done.stdout


def test_mcp_inspector_cli_lists_tools_and_shows_an_error_result(
    node: str, server_env: dict[str, str]
) -> None:
    listed = json.loads(_inspector(node, server_env, "tools/list"))
    assert len(listed["tools"]) == 12  # the contract's eleven and session_update
    assert all("outputSchema" in tool for tool in listed["tools"])
    called = json.loads(
        _inspector(
            node,
            server_env,
            "tools/call",
            "--tool-name",
            "session_info",
            "--tool-arg",
            "session_id=nope",
        )
    )
    assert called.get("isError") is True, called  # not the Inspector's own schema error
    assert "structuredContent" not in called
    error = json.loads(called["content"][0]["text"])["error"]
    assert error["code"] == "SESSION_NOT_FOUND"
    assert error["hint"]
