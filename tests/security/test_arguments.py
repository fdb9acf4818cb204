"""What a client chooses: project paths (symlinks too), working directory, environment, names,
image, runtime, limits, network. Each hostile value is refused with the contract's error, or
made harmless, and nothing host-side follows a symlink out of the project.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from sandbox.errors import InvalidArgumentError, PathNotAllowedError, SandboxError
from sandbox.mcp.server import build_server
from sandbox.models import CreateRequest
from sandbox.session.manager import SessionManager
from sandbox.session.profile import is_gvisor
from tests.conftest import make_project
from tests.security.conftest import open_session
from tests.served import payload

pytestmark = pytest.mark.docker


@pytest.fixture
def outside(allowed_root: Path) -> Iterator[Path]:
    """A host file a project must never expose (under the allowed root, outside the project)."""
    path = allowed_root / f"host-secret-{os.getpid()}"
    path.write_text("HOST-SECRET-CONTENT\n")
    path.chmod(0o644)
    yield path
    path.unlink(missing_ok=True)


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/", PathNotAllowedError),
        ("/etc", PathNotAllowedError),
        ("/var/run", PathNotAllowedError),
        ("/var/lib/docker", PathNotAllowedError),
        ("/proc/self/root", PathNotAllowedError),
        ("relative/dir", InvalidArgumentError),
        ("~/project", InvalidArgumentError),
        ("/tmp/\x00nul", InvalidArgumentError),
        ("/nonexistent-" + "x" * 20, InvalidArgumentError),
        ("/" + "a" * 5000, InvalidArgumentError),
    ],
)
def test_hostile_project_paths_are_refused(
    sec_manager: SessionManager, path: str, error: type[SandboxError]
) -> None:
    with pytest.raises(error):
        sec_manager.create(CreateRequest(project_path=path))


def test_a_symlinked_project_path_is_judged_by_its_target(
    sec_manager: SessionManager, allowed_root: Path
) -> None:
    link = allowed_root / f"link-to-etc-{os.getpid()}"
    link.symlink_to("/etc")
    try:
        with pytest.raises(PathNotAllowedError) as info:
            sec_manager.create(CreateRequest(project_path=str(link)))
        assert "/etc" in info.value.message
    finally:
        link.unlink()


def test_a_project_holding_the_engine_socket_is_refused(
    sec_manager: SessionManager, allowed_root: Path
) -> None:
    project = make_project("sock")
    try:
        (project / "docker.sock").symlink_to("/var/run/docker.sock")
        with pytest.raises(PathNotAllowedError):
            sec_manager.create(CreateRequest(project_path=str(project)))
    finally:
        shutil.rmtree(project, ignore_errors=True)


def test_symlinks_inside_the_project_resolve_inside_the_container(
    sec_manager: SessionManager, sec_project: Path, outside: Path
) -> None:
    (sec_project / "to-host-secret").symlink_to(outside)
    (sec_project / "to-etc").symlink_to("/etc")
    (sec_project / "to-parent").symlink_to("..")
    with open_session(sec_manager, sec_project) as session:
        result = session.execute(
            "cat to-host-secret 2>&1; cat to-etc/hostname; ls to-parent/ | head -5;"
            " ln -s / root-link && ls root-link/ | grep -c . ",
            timeout_s=10,
        )
        info = session.info("x")
    assert "HOST-SECRET-CONTENT" not in result.output
    assert "No such file" in result.output
    assert os.uname().nodename not in result.output.split("\n")[1:2]
    # gVisor's /proc refuses another process's cwd link: session_info cannot know it there
    assert info.cwd == ("/workspace" if not is_gvisor(session.spec.runtime) else None)
    # host-side, nothing followed the links the session left behind
    assert (sec_project / "root-link").is_symlink()
    assert outside.read_text() == "HOST-SECRET-CONTENT\n"


def test_a_symlink_swapped_in_for_the_project_after_creation_is_not_followed_on_the_host(
    sec_manager: SessionManager, outside: Path
) -> None:
    project = make_project("swap")
    with open_session(sec_manager, project) as session:
        session.execute("echo inside > made.txt", timeout_s=10)
        moved = project.with_name(project.name + "-moved")
        project.rename(moved)
        project.symlink_to(outside.parent)
        try:
            listed = session.execute("ls /workspace", timeout_s=10)
            assert listed.output == "made.txt\n"  # the mount is the directory, not the path
        finally:
            project.unlink()
            moved.rename(project)
    shutil.rmtree(project, ignore_errors=True)


@pytest.mark.parametrize(
    "request_fields",
    [
        {"workdir": "relative"},
        {"workdir": "/workspace\n/etc"},
        {"workdir": "/work\x00space"},
        {"env": {"A=B": "x"}},
        {"env": {"BAD NAME": "x"}},
        {"env": {"1X": "x"}},
        {"env": {"SANDBOX_RC": "echo pwned"}},
        {"env": {"X": "a\x00b"}},
        {"env": {f"V{i}": "x" for i in range(300)}},
        {"name": "../../etc"},
        {"name": "a/b"},
        {"name": "-rf"},
        {"name": "x" * 65},
        {"image": "alpine:latest"},
        {"image": "sandbox-session:latest@sha256:" + "0" * 64},
        {"runtime": "runc-but-not-allowed"},
        {"runtime": "io.containerd.runc.v2"},
        {"memory_mb": 10**6},
        {"pids": 10**6},
        {"cpus": 1000.0},
        {"memory_mb": 1},
        {"rows": 100000},
        {"cols": 0},
    ],
    ids=lambda fields: next(iter(fields)) + "=" + repr(next(iter(fields.values())))[:20],
)
def test_hostile_session_settings_are_refused(
    sec_manager: SessionManager, sec_project: Path, request_fields: dict[str, Any]
) -> None:
    def create() -> None:
        created = sec_manager.create(CreateRequest(project_path=str(sec_project), **request_fields))
        sec_manager.destroy(created.session_id, force=True)

    with pytest.raises((SandboxError, ValueError)):
        create()


def test_a_workdir_outside_the_workspace_stays_inside_the_container(
    sec_manager: SessionManager, sec_project: Path
) -> None:
    with open_session(
        sec_manager, sec_project, workdir="/workspace/../../etc", env={"LD_PRELOAD": "/x.so"}
    ) as session:
        result = session.execute("pwd; id -u; cat /etc/hostname", timeout_s=10)
    lines = result.output.splitlines()
    assert lines[0] == "/etc"  # the container's /etc, read-only
    assert lines[1] != "0"
    assert lines[2] != os.uname().nodename


def call_tool(manager: SessionManager, tool: str, **arguments: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        async with Client(build_server(manager.config, manager)) as client:
            with anyio.fail_after(60):
                result = await client.call_tool(tool, arguments)
        return {"is_error": result.is_error, **payload(result)}

    return anyio.run(go)


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"image": "debian:bookworm-slim"}, "INVALID_ARGUMENT"),
        ({"runtime": "runsc-unregistered"}, "INVALID_ARGUMENT"),
        ({"memory_mb": 999_999}, "INVALID_ARGUMENT"),
        ({"pids": 999_999}, "INVALID_ARGUMENT"),
        ({"workdir": "../etc"}, "INVALID_ARGUMENT"),
        ({"project_path": "/etc"}, "PATH_NOT_ALLOWED"),
        ({"project_path": "/"}, "PATH_NOT_ALLOWED"),
        ({"privileged": True}, "INVALID_ARGUMENT"),
        ({"cap_add": ["SYS_ADMIN"]}, "INVALID_ARGUMENT"),
        ({"volumes": ["/:/host"]}, "INVALID_ARGUMENT"),
    ],
    ids=lambda v: str(next(iter(v))) if isinstance(v, dict) else str(v),
)
def test_over_mcp_a_client_cannot_pick_container_settings(
    sec_manager: SessionManager, sec_project: Path, arguments: dict[str, Any], code: str
) -> None:
    data = call_tool(
        sec_manager, "session_create", **{"project_path": str(sec_project), **arguments}
    )
    assert data["is_error"]
    assert data["error"]["code"] == code
    assert data["error"]["hint"]


def test_the_operator_can_forbid_clients_turning_the_network_on(
    sec_manager: SessionManager, sec_project: Path
) -> None:
    locked = SessionManager(
        sec_manager.config.model_copy(update={"client_network": False}), sec_manager.backend
    )
    try:
        data = call_tool(locked, "session_create", project_path=str(sec_project), network=True)
        assert data["is_error"]
        assert data["error"]["code"] == "INVALID_ARGUMENT"
        assert "SANDBOX_CLIENT_NETWORK" in data["error"]["hint"]
    finally:
        locked.close()
