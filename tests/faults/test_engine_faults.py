"""The engine unreachable for a while, many sessions in a row, a full state directory."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import docker
import pytest
from mcp import Client

from sandbox.backends.docker import DockerBackend
from sandbox.config import LABEL_OWNER
from sandbox.errors import EngineUnavailableError
from sandbox.mcp.server import build_server
from sandbox.models import CreateRequest
from sandbox.session.manager import SessionManager
from tests.conftest import make_project
from tests.faults.conftest import SEC_OWNER, open_session, sec_config
from tests.served import payload

pytestmark = pytest.mark.docker


class SwitchableBackend:
    """A backend that can be pointed at a dead engine and back (everything else delegates)."""

    def __init__(self, live: DockerBackend) -> None:
        self.live = live
        self.dead = DockerBackend(
            docker.DockerClient(base_url="unix:///nonexistent.sock", version="1.41", timeout=2)
        )
        self.current = live

    def __getattr__(self, name: str) -> Any:
        return getattr(self.current, name)


def test_an_unreachable_engine_is_engine_unavailable_with_a_hint_then_recovers(
    engine: docker.DockerClient, allowed_root: Path, sec_project: Path
) -> None:
    backend = SwitchableBackend(DockerBackend())
    manager = SessionManager(sec_config(allowed_root), backend)  # type: ignore[arg-type]
    try:
        with open_session(manager, sec_project) as session:
            backend.current = backend.dead
            t0 = time.monotonic()
            with pytest.raises(EngineUnavailableError) as info:
                manager.create(CreateRequest(project_path=str(sec_project)))
            assert time.monotonic() - t0 < 20
            assert info.value.code == "ENGINE_UNAVAILABLE"
            assert "engine" in info.value.message
            assert "sandbox doctor" in info.value.hint

            async def over_mcp() -> dict[str, Any]:
                async with Client(build_server(manager.config, manager)) as client:
                    with anyio.fail_after(30):
                        result = await client.call_tool("server_info", {})
                assert result.is_error
                return payload(result)

            error = anyio.run(over_mcp)["error"]
            assert error["code"] == "ENGINE_UNAVAILABLE"
            assert error["hint"]
            # the open shell does not need the engine: builtins and programs still run
            assert session.execute("echo still-here", timeout_s=10).output == "still-here\n"
            session.info("attach")  # looking in fails softly
            backend.current = backend.live
            assert session.execute("echo back", timeout_s=10).output == "back\n"
            with open_session(manager, sec_project) as again:
                assert again.execute("echo new", timeout_s=10).output == "new\n"
    finally:
        backend.current = backend.live
        manager.close()


def fds() -> int:
    return len(list(Path("/proc/self/fd").iterdir()))


def test_fifty_sessions_opened_and_closed_leave_nothing(
    engine: docker.DockerClient, allowed_root: Path
) -> None:
    manager = SessionManager(sec_config(allowed_root, max_sessions=10))
    project = make_project("churn")
    try:
        errors: list[BaseException] = []

        def churn(n: int) -> None:
            try:
                for i in range(n):
                    created = manager.create(CreateRequest(project_path=str(project)))
                    out = manager.execute(f"echo {i}", session_id=created.session_id)
                    assert out.output == f"{i}\n"
                    manager.destroy(created.session_id)
            except BaseException as exc:
                errors.append(exc)

        # a first round fills the engine client's connection pools (bounded, not a leak)
        threads_before = threading.active_count()
        warm = [threading.Thread(target=churn, args=(2,)) for _ in range(5)]
        for worker in warm:
            worker.start()
        for worker in warm:
            worker.join(timeout=120)
        fds_before = fds()
        workers = [threading.Thread(target=churn, args=(8,)) for _ in range(5)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=240)
        assert errors == []
        assert manager.sessions() == []
        mine = {"label": f"{LABEL_OWNER}={SEC_OWNER}"}
        assert engine.containers.list(all=True, filters=mine) == []
        assert list((manager.config.state_dir / "sessions").glob("*")) == []
        deadline = time.monotonic() + 10  # reader threads end with their sockets
        while threading.active_count() > threads_before + 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert threading.active_count() <= threads_before + 2
        assert fds() <= fds_before + 5
    finally:
        manager.close()


@pytest.fixture
def tiny_state_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "full"
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a 1 MiB tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_execute_still_returns_the_tail_of_an_output_the_full_log_dropped(
    engine: docker.DockerClient, allowed_root: Path, tiny_state_dir: Path, sec_project: Path
) -> None:
    manager = SessionManager(sec_config(allowed_root, state_dir=tiny_state_dir))
    try:
        with open_session(manager, sec_project) as session:
            result = session.execute("seq 1 300000", timeout_s=30, max_lines=3)
            assert result.output == "299998\n299999\n300000\n"
    finally:
        manager.close()


def test_a_full_state_directory_keeps_the_log_complete_up_to_the_failure(
    engine: docker.DockerClient, allowed_root: Path, tiny_state_dir: Path, sec_project: Path
) -> None:
    manager = SessionManager(sec_config(allowed_root, state_dir=tiny_state_dir, record=True))
    try:
        with open_session(manager, sec_project) as session:
            result = session.execute("seq 1 300000", timeout_s=30, max_lines=3)
            assert result.exit_code == 0
            assert result.total_lines == 300000
            assert session.execute("echo alive", timeout_s=10).output == "alive\n"
            log_file = session.log.path
            stored = log_file.read_bytes()
            assert 0 < len(stored) < 1024 * 1024
            assert session.log.size > len(stored)  # the rest was produced, not kept
            # what was kept is exactly the start of the stream: no hole, no garbage
            body = stored[stored.index(b"S;") :].split(b"\x07", 1)[1]
            lines = body.split(b"\r\n")[:-1]
            assert lines[:3] == [b"1", b"2", b"3"]
            assert lines == [str(i).encode() for i in range(1, len(lines) + 1)]
            early = session.read_log(0, 4096).chunk
            assert "seq 1 300000" in early
            # a destroy on a full disk still removes the container
            assert manager.destroy(session.id, force=True).destroyed
            with pytest.raises(docker.errors.NotFound):
                engine.api.inspect_container(session.container_id)
    finally:
        manager.close()
