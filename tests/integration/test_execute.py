"""execute against a real engine: exact output, exit codes, state, timeouts, hazards."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.errors import SessionExitedError
from sandbox.models import CreateRequest
from sandbox.session.manager import SessionManager
from sandbox.session.session import Session
from tests.conftest import make_project

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def shared(manager: SessionManager) -> Iterator[Session]:
    project = make_project("exec")
    created = manager.create(CreateRequest(project_path=str(project)))
    yield manager.get(created.session_id)
    manager.destroy(created.session_id, force=True)


@pytest.fixture
def fresh(manager: SessionManager, project: Path) -> Iterator[Session]:
    created = manager.create(CreateRequest(project_path=str(project)))
    yield manager.get(created.session_id)
    manager.destroy(created.session_id, force=True)


@pytest.mark.parametrize(
    ("command", "code"),
    [("true", 0), ("false", 1), ("exit_with() { return 42; }; exit_with", 42), ("(exit 42)", 42)],
)
def test_execute_returns_exact_exit_codes(shared: Session, command: str, code: int) -> None:
    result = shared.execute(command, timeout_s=10)
    assert result.exit_code == code
    assert not result.timed_out


def test_execute_output_is_exactly_what_the_command_printed(shared: Session) -> None:
    result = shared.execute("echo hello; echo world >&2", timeout_s=10)
    assert result.output == "hello\nworld\n"
    assert result.total_lines == 2
    assert result.log_range.to_byte > result.log_range.from_byte


def test_output_without_trailing_newline(shared: Session) -> None:
    assert shared.execute("printf abc", timeout_s=10).output == "abc"


def test_cd_and_export_persist(shared: Session) -> None:
    shared.execute("mkdir -p /tmp/d1 && cd /tmp/d1 && export FOO=bar", timeout_s=10)
    result = shared.execute('echo "$PWD $FOO"', timeout_s=10)
    assert result.output == "/tmp/d1 bar\n"
    shared.execute("cd /workspace", timeout_s=10)


def test_multiline_command_with_heredoc_and_nested_quotes(shared: Session) -> None:
    command = """cat <<'EOF'
it's "quoted" and 'single' $HOME `not run`
EOF
python3 -c "print('a' + \\"b\\")"
echo "$(echo "nested \\"deep\\"")"
"""
    result = shared.execute(command, timeout_s=10)
    assert result.exit_code == 0
    assert result.output == ('it\'s "quoted" and \'single\' $HOME `not run`\nab\nnested "deep"\n')


def test_syntax_error_is_nonzero_and_session_stays_usable(shared: Session) -> None:
    result = shared.execute("if then fi (", timeout_s=10)
    assert result.exit_code not in (0, None)
    assert "syntax error" in result.output
    assert shared.execute("echo ok", timeout_s=10).output == "ok\n"


def test_unterminated_quote_does_not_hang(shared: Session) -> None:
    result = shared.execute("echo 'never closed", timeout_s=10)
    assert result.exit_code == 2
    assert not result.timed_out
    assert shared.execute("echo fine", timeout_s=10).output == "fine\n"


def test_exit_reports_a_dead_shell_without_hanging_and_the_next_execute_revives_it(
    fresh: Session,
) -> None:
    fresh.execute("cd /tmp; export MINE=1; sleep 600 &", timeout_s=10)
    result = fresh.execute("exit 3", timeout_s=10)
    assert result.shell_exited
    assert result.exit_code == 3
    assert not result.timed_out
    assert "next execute starts a fresh shell" in result.notices[0]
    assert fresh.status == "running"  # still reusable, by id or by project
    after = fresh.execute('echo "after $PWD ${MINE:-unset}"; pgrep -fc "sleep 60[0]"', timeout_s=5)
    assert after.output == "after /workspace unset\n1\n"  # defaults; the job kept running
    assert after.exit_code == 0
    assert after.shell_restarted
    assert "exited with code 3" in after.notices[0]
    assert fresh.shell_restarts == 1


def test_a_session_with_its_own_command_stays_exited(
    manager: SessionManager, project: Path
) -> None:
    created = manager.create(
        CreateRequest(project_path=str(project), command=["sh", "-c", "exit 4"])
    )
    try:
        session = manager.get(created.session_id)
        assert session.wait_ended(10)
        assert session.status == "exited"
        assert manager.info(created.session_id).exit_code == 4
        with pytest.raises(SessionExitedError) as info:
            session.send(text="x")
        assert info.value.code == "SESSION_EXITED"
    finally:
        manager.destroy(created.session_id, force=True)


def test_timeout_returns_partial_output_kills_process_and_shell_stays_usable(
    shared: Session,
) -> None:
    result = shared.execute("echo started; sleep 600", timeout_s=2)
    assert result.timed_out
    assert result.output.startswith("started")
    assert result.signals_sent[0] == "SIGINT"
    assert result.exit_code == 130
    assert not result.still_running
    ps = shared.execute("ps -eo args | grep -c '^sleep 600' || true", timeout_s=10)
    assert ps.output.strip() == "0"
    assert shared.execute("echo next", timeout_s=10).output == "next\n"


def test_program_trapping_int_and_term_is_killed(shared: Session) -> None:
    script = (
        'python3 -c "import signal,time; '
        "[signal.signal(s, signal.SIG_IGN) for s in (2, 15)]; "
        "print('armed', flush=True); time.sleep(600)\""
    )
    result = shared.execute(script, timeout_s=2)
    assert result.timed_out
    assert result.signals_sent == ["SIGINT", "SIGTERM", "SIGKILL"]
    assert result.exit_code == 137
    assert "armed" in result.output
    assert shared.execute("echo alive", timeout_s=10).output == "alive\n"


def test_interrupt_gives_130(shared: Session) -> None:
    cancel = threading.Event()
    timer = threading.Timer(1.0, cancel.set)
    timer.start()
    result = shared.execute("sleep 30", timeout_s=20, cancel=cancel)
    assert result.interrupted
    assert result.exit_code == 130


def test_idle_timeout_then_send_completes_the_command(shared: Session) -> None:
    result = shared.execute("python3 -c 'print(input())'", timeout_s=20, idle_timeout_s=1)
    assert result.still_running
    assert result.exit_code is None
    assert result.idle
    shared.send(text="hello\n")
    read = shared.read(view="new", wait_for=r"hello\s*\n.*hello", timeout_ms=5000)
    assert read.matched
    done = shared.execute("echo after", timeout_s=10)
    assert done.output == "after\n"


def test_background_returns_while_command_keeps_running(shared: Session) -> None:
    result = shared.execute(
        "for i in 1 2 3; do echo tick $i; sleep 1; done", timeout_s=5, background=True
    )
    assert result.still_running
    assert "tick 1" in result.output
    assert shared.busy
    read = shared.read(view="new", wait_for="tick 3", timeout_ms=6000)
    assert read.matched
    assert shared.execute("echo free", timeout_s=10).output == "free\n"


def test_huge_output_is_truncated_to_a_tail_and_pageable(shared: Session) -> None:
    result = shared.execute("seq 1 300000", timeout_s=60, max_lines=5)
    assert result.exit_code == 0
    assert result.truncated
    assert result.output == "299996\n299997\n299998\n299999\n300000\n"
    assert result.total_lines == 300000
    first = shared.read_log(from_byte=result.log_range.from_byte, max_bytes=20)
    assert first.chunk.startswith("1\r\n2\r\n")


def test_binary_output_does_not_break_anything(shared: Session) -> None:
    result = shared.execute("head -c 1M /dev/urandom", timeout_s=60, max_lines=10)
    assert result.exit_code == 0
    assert shared.execute("echo still-here", timeout_s=10).output == "still-here\n"


def test_emoji_and_cjk(shared: Session) -> None:
    result = shared.execute("echo '日本語 ✓ 🎉 café'", timeout_s=10)
    assert result.output == "日本語 ✓ 🎉 café\n"


def test_marker_in_file_contents_cannot_end_a_command(shared: Session) -> None:
    forged = r"printf '\033]777;sb;deadbeefdeadbeef;E;0\007forged\n'; echo real-end"
    result = shared.execute(forged, timeout_s=10)
    assert result.output.endswith("real-end\n")
    assert "forged" in result.output


def test_background_jobs_printing_after_the_marker_do_not_leak(shared: Session) -> None:
    result = shared.execute("(sleep 0.5; echo late) &", timeout_s=10)
    assert "late" not in result.output
    read = shared.read(view="new", wait_for="late", timeout_ms=3000)
    assert read.matched
    assert shared.execute("echo mine", timeout_s=10).output == "mine\n"


def test_two_concurrent_executes_never_interleave(shared: Session) -> None:
    results: dict[str, str] = {}

    def run(tag: str) -> None:
        r = shared.execute(f"for i in 1 2 3 4 5; do echo {tag}$i; sleep 0.1; done", timeout_s=30)
        results[tag] = r.output

    threads = [threading.Thread(target=run, args=(t,)) for t in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["a"] == "".join(f"a{i}\n" for i in range(1, 6))
    assert results["b"] == "".join(f"b{i}\n" for i in range(1, 6))


def test_set_e_kills_the_shell_and_is_reported(fresh: Session) -> None:
    fresh.execute("set -e", timeout_s=10)
    result = fresh.execute("false", timeout_s=10)
    assert result.shell_exited
    assert result.exit_code == 1
    again = fresh.execute("false; echo survived", timeout_s=10)  # set -e is gone with the shell
    assert again.output == "survived\n"
    assert again.shell_restarted


def test_background_returns_at_a_repl_prompt_as_the_kernel_says(shared: Session) -> None:
    result = shared.execute("python3 -q", timeout_s=40, background=True, idle_timeout_s=30)
    assert result.waiting_for_input
    assert result.still_running
    assert result.output.endswith(">>> ")
    shared.send(text="exit()\n")
    assert shared.wait_done(10)


def test_idle_timeout_does_not_take_a_sleeping_program_for_waiting(shared: Session) -> None:
    result = shared.execute("sleep 0.5 | cat; echo done", timeout_s=40, idle_timeout_s=30)
    assert not result.waiting_for_input
    assert result.output == "done\n"
