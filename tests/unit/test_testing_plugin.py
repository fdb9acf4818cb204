"""``sandbox.testing`` without an engine: the pytest plugin is registered, opt-out-able, and
starts nothing until a test asks for its fixtures; the Ryuk default; the session helper; the
server image's entrypoint when the engine socket is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

import sandbox.testing
import sandbox.testing.server
from sandbox.testing import SandboxSession, SandboxToolError

pytest_plugins = ("pytester",)

REPO = Path(__file__).resolve().parents[2]
NO_ENGINE = "unix:///nonexistent/docker.sock"

USER_TESTS = """
def test_without_the_fixtures():
    assert True
"""


def test_the_pytest11_entry_point_loads_the_module() -> None:
    found = [e for e in entry_points(group="pytest11") if e.value == "sandbox.testing"]
    assert [e.name for e in found] == ["sandbox.testing"]


def test_importing_the_module_leaves_the_ryuk_setting_alone() -> None:
    env = {k: v for k, v in os.environ.items() if k != sandbox.testing.server.RYUK_ENV}
    code = "import os, sandbox.testing; print(os.environ.get('TESTCONTAINERS_RYUK_DISABLED'))"
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert run.stdout.strip() == "None"


def test_without_testcontainers_the_module_loads_and_using_it_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['testcontainers'] = None\n"
        "import sandbox.testing\n"
        "try:\n"
        "    sandbox.testing.SandboxServerContainer(projects_dir='/tmp')\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert "pip install 'testcontainers" in run.stdout


def test_ryuk_is_disabled_when_unset_and_an_explicit_choice_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(sandbox.testing.server.RYUK_ENV, raising=False)
    sandbox.testing.disable_ryuk_unless_set()
    assert os.environ[sandbox.testing.server.RYUK_ENV] == "true"
    monkeypatch.setenv(sandbox.testing.server.RYUK_ENV, "false")
    sandbox.testing.disable_ryuk_unless_set()
    assert os.environ[sandbox.testing.server.RYUK_ENV] == "false"


def test_fixtures_are_offered_and_unused_ones_start_nothing(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)  # any engine call would fail
    pytester.makepyfile(test_user=USER_TESTS)
    listed = pytester.runpytest_subprocess("--fixtures", "-p", "sandbox.testing")
    listed.stdout.fnmatch_lines(["*sandbox_server*", "*sandbox_session*"])
    result = pytester.runpytest_subprocess("-p", "sandbox.testing", "-q")
    result.assert_outcomes(passed=1)


def test_the_plugin_can_be_switched_off(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    listed = pytester.runpytest_subprocess("--fixtures", "-p", "no:sandbox.testing")
    assert "sandbox_session" not in listed.stdout.str()


class FakeServer:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def call(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        self.calls.append((tool, arguments or {}))
        if tool == "session_destroy":
            raise SandboxToolError(tool, "SESSION_NOT_FOUND", "gone", "hint")
        return {"tool": tool}


def test_session_helpers_send_the_session_id(tmp_path: Path) -> None:
    server = FakeServer()
    session = SandboxSession(server, "abc123", tmp_path)  # type: ignore[arg-type]
    assert session.execute("make test", timeout_s=120, max_lines=5) == {"tool": "execute"}
    session.call("read", view="screen")
    session.destroy()  # an already destroyed session is fine
    assert server.calls == [
        (
            "execute",
            {"session_id": "abc123", "command": "make test", "timeout_s": 120, "max_lines": 5},
        ),
        ("read", {"session_id": "abc123", "view": "screen"}),
        ("session_destroy", {"session_id": "abc123", "force": True}),
    ]


def test_a_tool_error_carries_the_contract_fields() -> None:
    error = SandboxToolError("execute", "PATH_NOT_ALLOWED", "not under a root", "use another")
    assert (error.code, error.message, error.hint) == (
        "PATH_NOT_ALLOWED",
        "not under a root",
        "use another",
    )
    assert str(error) == "execute: PATH_NOT_ALLOWED: not under a root (use another)"


def test_the_image_entrypoint_says_how_to_mount_a_missing_socket() -> None:
    run = subprocess.run(
        ["sh", str(REPO / "images" / "server" / "entrypoint.sh"), "--version"],
        env={**os.environ, "DOCKER_HOST": NO_ENGINE},
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 78
    assert "no engine socket at /nonexistent/docker.sock" in run.stderr
    assert "-v /var/run/docker.sock:" in run.stderr
