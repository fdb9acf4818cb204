"""The container is killed or paused from outside, mid-command and while idle: the call returns
in bounded time with a clear result or SESSION_EXITED, and the session recovers or is destroyed
cleanly."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from sandbox.errors import SandboxError, SessionExitedError
from sandbox.models import ExecResult
from sandbox.session.manager import SessionManager
from tests.faults.conftest import open_session, sec_config

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def faults_manager(engine: docker.DockerClient, allowed_root: Path) -> Iterator[SessionManager]:
    mgr = SessionManager(sec_config(allowed_root))
    yield mgr
    mgr.close()


def run_while(
    action: Callable[[], ExecResult], fault: Callable[[], None], after_s: float = 0.8
) -> tuple[ExecResult | None, BaseException | None, float]:
    """Run ``action`` in a thread, apply ``fault`` after ``after_s``; (result, error, seconds)."""
    out: dict[str, object] = {}

    def target() -> None:
        try:
            out["result"] = action()
        except BaseException as exc:
            out["error"] = exc

    t0 = time.monotonic()
    thread = threading.Thread(target=target)
    thread.start()
    time.sleep(after_s)
    fault()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the call hung after the fault"
    result = out.get("result")
    error = out.get("error")
    return (
        result if isinstance(result, ExecResult) else None,
        error if isinstance(error, BaseException) else None,
        time.monotonic() - t0,
    )


def test_a_container_killed_mid_command_ends_the_call_and_the_session_cleanly(
    faults_manager: SessionManager, sec_project: Path, engine: docker.DockerClient
) -> None:
    with open_session(faults_manager, sec_project) as session:
        result, error, _ = run_while(
            lambda: session.execute("sleep 30", timeout_s=20),
            lambda: engine.api.kill(session.container_id),
        )
        assert error is None, error
        assert result is not None
        assert result.shell_exited
        assert not result.still_running
        with pytest.raises(SessionExitedError) as info:
            session.execute("echo again", timeout_s=5)
        assert info.value.code == "SESSION_EXITED"
        assert faults_manager.info(session.id).status == "exited"
        cid = session.container_id
    with pytest.raises(docker.errors.NotFound):
        engine.api.inspect_container(cid)


def test_a_container_killed_while_idle_is_session_exited_on_the_next_call(
    faults_manager: SessionManager, sec_project: Path, engine: docker.DockerClient
) -> None:
    with open_session(faults_manager, sec_project) as session:
        engine.api.kill(session.container_id)
        time.sleep(0.5)
        with pytest.raises(SessionExitedError):
            session.execute("echo x", timeout_s=5)
        with pytest.raises(SessionExitedError):
            session.send(text="x")
        assert session.read().exited


def test_a_container_paused_mid_command_is_recovered_by_a_reset(
    faults_manager: SessionManager, sec_project: Path, engine: docker.DockerClient
) -> None:
    with open_session(faults_manager, sec_project) as session:
        try:
            result, error, _ = run_while(
                lambda: session.execute("sleep 30", timeout_s=3),
                lambda: engine.api.pause(session.container_id),
            )
        finally:
            if engine.api.inspect_container(session.container_id)["State"]["Paused"]:
                engine.api.unpause(session.container_id)
        assert error is None, error
        assert result is not None
        assert result.timed_out
        assert result.session_reset
        assert session.execute("echo back", timeout_s=10).output == "back\n"


def test_a_container_paused_while_idle_does_not_hang_the_next_command(
    faults_manager: SessionManager, sec_project: Path, engine: docker.DockerClient
) -> None:
    with open_session(faults_manager, sec_project) as session:
        engine.api.pause(session.container_id)
        try:
            t0 = time.monotonic()
            outcome: ExecResult | SandboxError
            try:
                outcome = session.execute("echo hi", timeout_s=2)
            except SandboxError as exc:  # a clear error is fine too; a hang is not
                outcome = exc
            assert time.monotonic() - t0 < 30
            if isinstance(outcome, SandboxError):
                assert outcome.code in {"SESSION_EXITED", "ENGINE_UNAVAILABLE", "SESSION_BUSY"}
            else:
                assert outcome.session_reset or outcome.output == "hi\n"
        finally:
            if engine.api.inspect_container(session.container_id)["State"]["Paused"]:
                engine.api.unpause(session.container_id)
        assert session.execute("echo back", timeout_s=10).output == "back\n"
