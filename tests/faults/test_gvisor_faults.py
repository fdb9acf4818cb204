"""gVisor's sandbox process killed from outside mid-command (an OOM killer, an operator, a
crash of the sentry): the call returns in bounded time and says so, the session's container is
removed with it, no runsc process of it stays behind, and the next session starts.

Needs the engine's ``runsc`` runtime; skipped, with the reason, where it is not registered
(scripts/engine.sh registers it where it provisions the engine)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from sandbox.backends import connect
from sandbox.errors import SessionExitedError
from sandbox.session.manager import SessionManager
from tests.faults.conftest import open_session, sec_config
from tests.faults.test_container_faults import run_while

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def gvisor_manager(engine: docker.DockerClient, allowed_root: Path) -> Iterator[SessionManager]:
    if "runsc" not in connect().describe().runtimes:
        pytest.skip("the engine has no runsc runtime registered (scripts/engine.sh registers it)")
    mgr = SessionManager(sec_config(allowed_root, "runsc"))
    yield mgr
    mgr.close()


def runsc_pids(container_id: str) -> list[int]:
    """Host processes of the container's gVisor sandbox (its id is in their command line)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if container_id.encode() in cmdline and b"runsc" in cmdline:
            found.append(int(proc.name))
    return found


def kill_sandbox(container_id: str) -> None:
    """SIGKILL the sentry (``runsc-sandbox``/``boot``) of the container, as an OOM killer would."""
    targets = [
        p for p in runsc_pids(container_id) if b"boot" in Path(f"/proc/{p}/cmdline").read_bytes()
    ]
    assert targets, f"no runsc sandbox process for {container_id[:12]}"
    for pid in targets:
        os.kill(pid, signal.SIGKILL)


def test_a_sandbox_killed_mid_command_ends_the_call_and_the_next_session_starts(
    gvisor_manager: SessionManager, sec_project: Path, engine: docker.DockerClient
) -> None:
    with open_session(gvisor_manager, sec_project) as session:
        assert session.execute("echo up", timeout_s=10).output == "up\n"
        cid = session.container_id
        result, error, seconds = run_while(
            lambda: session.execute("sleep 30", timeout_s=20), lambda: kill_sandbox(cid)
        )
        assert seconds < 20, "the call waited for its own timeout instead of noticing"
        if error is not None:  # a clear contract error, never a hang or a raw exception
            assert isinstance(error, SessionExitedError), error
        else:
            assert result is not None
            assert result.shell_exited or result.session_reset, result
            assert not result.still_running
    # the container and every runsc process of it are gone with the session
    with pytest.raises(docker.errors.NotFound):
        engine.api.inspect_container(cid)
    deadline = time.monotonic() + 10
    while runsc_pids(cid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert runsc_pids(cid) == []
    with open_session(gvisor_manager, sec_project) as fresh:
        assert fresh.execute("echo again", timeout_s=10).output == "again\n"
