"""Durable sessions against a real engine: a server killed and restarted, owners, idle TTL,
a person attaching, and recordings.

The servers are real ``sandbox serve`` processes on loopback driven by the SDK's streamable
HTTP client, so "kill the server" is a SIGKILL of a real process.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import secrets
import select
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import docker
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from sandbox.config import LABEL_OWNER
from sandbox.errors import SessionNotFoundError
from sandbox.models import CreateRequest
from sandbox.session.manager import SessionManager
from tests.conftest import make_project
from tests.integration.conftest import make_config
from tests.served import start_server

pytestmark = pytest.mark.docker

RUN = secrets.token_hex(4)
OWNER_A = f"durable-a-{RUN}"
OWNER_B = f"durable-b-{RUN}"


@pytest.fixture(scope="module")
def engine(docker_client: object) -> Iterator[docker.DockerClient]:
    assert isinstance(docker_client, docker.DockerClient)
    yield docker_client
    for owner in (OWNER_A, OWNER_B):
        label = {"label": f"{LABEL_OWNER}={owner}"}
        for container in docker_client.containers.list(all=True, filters=label):
            container.remove(force=True)
        for volume in docker_client.volumes.list(filters=label):
            volume.remove(force=True)


class Server:
    """A ``sandbox serve`` process on loopback that tests can call, kill and restart."""

    def __init__(self, owner: str, root: Path, state: Path) -> None:
        env = dict(os.environ)
        env.pop("SANDBOX_TOKEN", None)
        env.update(
            SANDBOX_OWNER=owner,
            SANDBOX_STATE_DIR=str(state),
            SANDBOX_ALLOWED_ROOTS=str(root),
            SANDBOX_MEMORY_MB="512",
        )
        self.env = env
        served = start_server(env, quiet=False)
        self.proc, self.port, self.base = served.proc, served.port, served.base

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            async with (
                httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=120)) as http,
                Client(streamable_http_client(self.base + "/mcp", http_client=http)) as client,
            ):
                with anyio.fail_after(90):
                    result = await client.call_tool(tool, arguments)
            assert not result.is_error, result.structured_content
            assert result.structured_content is not None
            return dict(result.structured_content)

        return anyio.run(go)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            assert self.proc.wait(timeout=30) == 0


def test_a_durable_session_survives_a_killed_server(
    engine: docker.DockerClient, allowed_root: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    first = Server(OWNER_A, allowed_root, state)
    project = make_project("durable")
    try:
        durable = first.call("session_create", project_path=str(project), durable=True)
        plain = first.call("session_create", project_path=str(project))
        sid = durable["session_id"]
        first.call("execute", session_id=sid, command="export KEPT=across-restarts")
        started = first.call(
            "execute",
            session_id=sid,
            command="sleep 20; echo finished",
            background=True,
            timeout_s=2,
        )
        assert started["still_running"]
        before = first.call("read_log", session_id=sid, from_byte=0, max_bytes=1024 * 1024)
        first.kill()
    finally:
        first.stop()

    second = Server(OWNER_A, allowed_root, state)
    try:
        listed = {s["session_id"]: s for s in second.call("session_list")["sessions"]}
        assert sid in listed
        assert listed[sid]["durable"]
        assert plain["session_id"] not in listed
        gone = engine.containers.list(all=True, filters={"id": plain["container_id"]})
        assert gone == []  # the killed server's plain session was removed at restart
        read = second.call("read", session_id=sid, wait_for="finished", timeout_ms=30000)
        assert read["matched"]
        after = second.call("read_log", session_id=sid, from_byte=0, max_bytes=1024 * 1024)
        # the same bytes at the same offsets, then more: no gap, no duplicate
        assert after["chunk"].startswith(before["chunk"])
        assert after["total_bytes"] > before["total_bytes"]
        assert after["chunk"].count("finished") == before["chunk"].count("finished") + 1
        kept = second.call("execute", session_id=sid, command="echo $KEPT")
        assert kept["output"] == "across-restarts\n"
        second.call("session_destroy", session_id=sid, force=True)
    finally:
        second.stop()
    label = {"label": f"{LABEL_OWNER}={OWNER_A}"}
    assert engine.containers.list(all=True, filters=label) == []
    assert engine.volumes.list(filters=label) == []


def test_two_servers_with_different_owners_leave_each_other_alone(
    engine: docker.DockerClient, allowed_root: Path, tmp_path: Path
) -> None:
    project = make_project("owners")
    a = Server(OWNER_A, allowed_root, tmp_path / "state")
    try:
        mine = a.call("session_create", project_path=str(project), durable=True)
        plain = a.call("session_create", project_path=str(project))
        b = Server(OWNER_B, allowed_root, tmp_path / "state")  # same state dir, other owner
        try:
            theirs = b.call("session_list")
            assert theirs["count"] == 0
            b.call("session_create", project_path=str(project))
        finally:
            b.stop()
        listed = {s["session_id"] for s in a.call("session_list")["sessions"]}
        assert listed == {mine["session_id"], plain["session_id"]}
        assert a.call("execute", session_id=plain["session_id"], command="echo ok")["output"]
        a.call("session_destroy", session_id=mine["session_id"], force=True)
    finally:
        a.stop()


def test_idle_ttl_stops_idle_sessions_and_keeps_a_durable_log(
    engine: docker.DockerClient, allowed_root: Path
) -> None:
    manager = SessionManager(make_config(allowed_root, owner=OWNER_A, idle_ttl_s=1))
    try:
        project = make_project("idle")
        plain = manager.create(CreateRequest(project_path=str(project)))
        kept = manager.create(CreateRequest(project_path=str(project), durable=True))
        manager.execute("echo remember-me", session_id=kept.session_id)
        durable = manager.get(kept.session_id)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            plain_gone = all(s.id != plain.session_id for s in manager.sessions())
            # The reaper marks the session exited, then stops its container: wait for both.
            stopped = not engine.containers.get(kept.container_id).attrs["State"]["Running"]
            if plain_gone and durable.status == "exited" and stopped:
                break
            time.sleep(0.2)
        with pytest.raises(SessionNotFoundError):
            manager.get(plain.session_id)
        assert durable.status == "exited"
        assert "remember-me" in durable.read_log(0, 1024 * 1024).chunk
        assert not engine.containers.get(kept.container_id).attrs["State"]["Running"]
        manager.destroy(kept.session_id, force=True)
    finally:
        manager.close()


def _pty_run(argv: list[str], env: dict[str, str], steps: list[tuple[str, bytes]]) -> bytes:
    """Run ``argv`` on a pseudo-terminal; for each (expected, keys) wait for ``expected`` in the
    output, then type ``keys``. Returns everything it printed."""
    pid, fd = pty.fork()
    if pid == 0:  # child
        os.execvpe(argv[0], argv, env)
    seen = b""
    try:
        for expected, keys in steps:
            deadline = time.monotonic() + 30
            while expected.encode() not in seen:
                assert time.monotonic() < deadline, f"never saw {expected!r} in {seen[-500:]!r}"
                ready, _, _ = select.select([fd], [], [], 0.2)
                if ready:
                    try:
                        seen += os.read(fd, 65536)
                    except OSError:
                        break
            time.sleep(0.3)  # a person's pace: tmux would take a burst for a paste
            os.write(fd, keys)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            done, _status = os.waitpid(pid, os.WNOHANG)
            if done:
                return seen
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                with contextlib.suppress(OSError):
                    seen += os.read(fd, 65536)
        raise AssertionError(f"attach did not exit: {seen[-500:]!r}")
    finally:
        os.close(fd)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def test_a_person_attaches_types_detaches_and_the_agent_carries_on(
    engine: docker.DockerClient, allowed_root: Path
) -> None:
    config = make_config(allowed_root, owner=OWNER_A)
    manager = SessionManager(config)
    try:
        created = manager.create(
            CreateRequest(project_path=str(make_project("attach")), durable=True)
        )
        info = manager.info(created.session_id)
        assert "tmux" in info.attach_command
        assert "attach-session" in info.attach_command
        env = dict(os.environ, SANDBOX_STATE_DIR=str(config.state_dir), TERM="xterm-256color")
        out = _pty_run(
            [sys.executable, "-m", "sandbox", "attach", created.session_id],
            env,
            [
                ("sandbox:/workspace$", b"echo typed-by-a-person > /tmp/person.txt\r"),
                ("sandbox:/workspace$", b"\x02"),  # ctrl-b d, typed as a person types:
                ("", b"d"),  # tmux takes fast input for a paste and ignores its bindings
            ],
        )
        assert b"attached to the agent's terminal" in out
        session = manager.get(created.session_id)
        seen = session.read(view="scrollback", wait_for="typed-by-a-person", timeout_ms=5000)
        assert seen.matched  # the agent sees what the person typed
        result = manager.execute("cat /tmp/person.txt", session_id=created.session_id)
        assert result.output == "typed-by-a-person\n"
        manager.destroy(created.session_id, force=True)
    finally:
        manager.close()


def test_recording_is_asciicast_v2_and_adds_up_to_the_log(
    engine: docker.DockerClient, allowed_root: Path
) -> None:
    manager = SessionManager(make_config(allowed_root, owner=OWNER_A))
    try:
        created = manager.create(CreateRequest(project_path=str(make_project("cast"))))
        session = manager.get(created.session_id)
        session.execute("printf 'héllo 🎉\\n'; seq 1 2000", timeout_s=30)
        session.resize(30, 100)
        session.execute("echo done", timeout_s=10)
        assert session.recording is not None
        path = session.recording.path
        # the prompt after "done" may still be on its way: compare once the terminal is quiet
        size = -1
        while size != session.log.size:
            size = session.log.size
            session.wait_output(size, 0.3)
        raw = session.log.read(0, session.log.size)
        lines = path.read_text(encoding="utf-8").splitlines()
        header = json.loads(lines[0])
        assert header["version"] == 2
        assert (header["width"], header["height"]) == (80, 24)
        events = [json.loads(line) for line in lines[1:]]
        times = [e[0] for e in events]
        assert times == sorted(times)
        assert {"o", "r"} >= {e[1] for e in events}
        assert ["r", "100x30"] in [e[1:] for e in events]
        output = "".join(e[2] for e in events if e[1] == "o")
        assert output == raw.decode("utf-8", "replace")
        manager.destroy(created.session_id, force=True)
    finally:
        manager.close()
