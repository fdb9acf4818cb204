"""``background`` and ``idle_timeout_s`` return when the kernel says the program waits for
terminal input, not after a silence; quiet or slow programs are not taken for waiting.

The fake backend runs the shell on a host pty, so the watcher reads the host's real ``/proc``:
these are the kernel's answers, not a stand-in. The idle timeouts are long on purpose: a
result that came back by the silence rule would say ``waiting_for_input: false``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.backends.fake import FakeBackend
from sandbox.config import SandboxConfig
from sandbox.models import CreateRequest
from sandbox.session.input_watch import (
    BACKOFF_S,
    QUIET_BEFORE_ASK_S,
    RETRY_ASK_S,
    InputPacer,
    InputWatch,
)
from sandbox.session.manager import SessionManager
from sandbox.session.session import Session
from sandbox.shell.input_wait import parse_answer

PATIENT = {"timeout_s": 40, "idle_timeout_s": 30}


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
def session(tmp_path: Path, backend: FakeBackend) -> Iterator[Session]:
    (tmp_path / "proj").mkdir()
    config = SandboxConfig(state_dir=tmp_path / "state", allowed_roots=(tmp_path,))
    manager = SessionManager(config, backend)
    created = manager.create(CreateRequest(project_path=str(tmp_path / "proj")))
    yield manager.get(created.session_id)
    manager.close()


def test_background_returns_at_a_repl_prompt_waiting_for_input(session: Session) -> None:
    result = session.execute("python3 -q", timeout_s=40, background=True, idle_timeout_s=30)
    assert result.waiting_for_input
    assert result.idle
    assert result.still_running
    assert result.output.endswith(">>> ")
    session.send(text="6 * 7\n")
    assert session.read(view="new", wait_for="42", timeout_ms=5000).matched
    session.send(text="exit()\n")
    assert session.wait_done(5)


def test_a_program_reading_the_terminal_without_a_prompt_is_waiting(session: Session) -> None:
    result = session.execute("cat", **PATIENT)
    assert result.waiting_for_input
    assert result.output == ""
    session.send(keys=["ctrl+d"])
    assert session.wait_done(5)


def test_the_shells_own_read_builtin_is_waiting(session: Session) -> None:
    result = session.execute("read -r name; echo hello $name", **PATIENT)
    assert result.waiting_for_input
    session.send(text="agent\n")
    assert session.wait_done(5)
    assert "hello agent" in session.read(view="new").content


def test_a_quiet_working_program_is_not_taken_for_waiting(session: Session) -> None:
    result = session.execute("sleep 0.6; echo done", **PATIENT)
    assert not result.waiting_for_input
    assert result.exit_code == 0
    assert result.output == "done\n"


def test_a_slow_printer_is_not_cut_off(session: Session) -> None:
    result = session.execute("for i in 1 2 3; do echo $i; sleep 0.3; done", **PATIENT)
    assert result.exit_code == 0
    assert result.output == "1\n2\n3\n"


def test_a_program_reading_a_pipe_is_not_waiting_for_the_terminal(session: Session) -> None:
    result = session.execute("(sleep 0.6; echo piped) | cat", **PATIENT)
    assert not result.waiting_for_input
    assert result.output == "piped\n"


def test_a_kernel_that_cannot_say_leaves_the_silence_rule(
    session: Session, backend: FakeBackend
) -> None:
    """gVisor's /proc names no foreground group: the watcher answers ``unknown`` and the
    session stops asking; the idle return then comes from silence alone."""
    script = 'while read -r n p; do echo "$n unknown"; done'
    watch = InputWatch(
        lambda: backend.exec_attach(
            session.container_id,
            ["bash", "-c", script],
            user="",
            env={},
            workdir="/",
            rows=24,
            cols=80,
        ),
        "t",
    )
    session.runner.input_watch = watch
    # long enough for the watcher's bash to start and answer on a loaded machine
    result = session.execute("cat", timeout_s=10, idle_timeout_s=3)
    assert watch.unsupported
    assert result.idle
    assert not result.waiting_for_input
    session.send(keys=["ctrl+d"])
    assert session.wait_done(5)
    watch.close()


def test_answers_are_parsed_strictly() -> None:
    assert parse_answer("12 input\r") == (12, "input")
    assert parse_answer("3 shell") == (3, "shell")
    assert parse_answer("3 maybe") is None
    assert parse_answer("12 34") is None
    assert parse_answer("") is None


def test_questions_follow_output_pauses_and_back_off_while_quiet() -> None:
    pacer = InputPacer()
    assert pacer.due_at(10.0) == 10.0 + QUIET_BEFORE_ASK_S
    pacer.asked(10.0, 11.0)
    assert pacer.due_at(10.0) == 11.0 + BACKOFF_S[0]
    pacer.asked(10.0, 12.0)
    assert pacer.due_at(10.0) == 12.0 + BACKOFF_S[1]
    assert pacer.due_at(13.0) == 13.0 + QUIET_BEFORE_ASK_S  # fresh output starts over
    pacer.retry(13.0, 14.0)  # no answer yet (the watcher starts): soon again, no back-off
    assert pacer.due_at(13.0) == 14.0 + RETRY_ASK_S
    pacer.asked(13.0, 15.0)
    assert pacer.due_at(13.0) == 15.0 + BACKOFF_S[0]
