"""Jobs that resist signals or escape their process group, an agent that attacks its own
sandbox or sabotages its shell, input that could confuse the marker protocol. The outcome is
always: the call returns in bounded time, nothing of the job keeps running, the session works.
"""

from __future__ import annotations

import pytest

from sandbox.session.session import Session

pytestmark = pytest.mark.docker

# What must remain in a quiet session: the keepalive (and its init), the shell, the probe.
PS = "ps -eo user=,pid=,ppid=,pgid=,args= | grep -v ' ps -eo'"


def user_processes(session: Session) -> list[str]:
    """The shell user's processes other than the shell itself and the probe (job notices
    such as "[1]+ Killed" are not processes)."""
    out = session.execute(PS, timeout_s=10).output.splitlines()
    return [
        line
        for line in out
        if len(line.split()) > 4
        and line.split()[1].isdigit()
        and not line.startswith("nobody")
        and "bash --noprofile --rcfile" not in line
    ]


def works(session: Session) -> None:
    result = session.execute("echo still-$((6*7))", timeout_s=10)
    assert result.output == "still-42\n", result
    assert result.exit_code == 0


ESCAPES = {
    "ignores-int-and-term": "trap '' INT TERM; sleep 1000",
    "setsid": "setsid sleep 1001 & sleep 1000",
    "nohup": "nohup sleep 1002 >/dev/null 2>&1 & sleep 1000",
    "double-fork": "(sleep 1003 &) ; sleep 1000",
    "setsid-loop-ignoring-signals": (
        "setsid bash -c 'trap \"\" INT TERM HUP; while :; do sleep 1; done' & "
        "trap '' INT TERM; sleep 1000"
    ),
    "forks-while-being-killed": (
        "setsid bash -c 'while :; do (sleep 100 &); sleep 0.05; done' & sleep 1000"
    ),
    "disowned-background": "sleep 1004 & disown; sleep 1000",
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_a_timeout_leaves_nothing_of_the_command_running(fresh: Session, name: str) -> None:
    result = fresh.execute(ESCAPES[name], timeout_s=1.5)
    assert result.timed_out
    assert not result.still_running
    assert result.exit_code is not None
    assert user_processes(fresh) == []
    works(fresh)


def test_a_daemon_started_by_an_earlier_command_survives_a_later_timeout(fresh: Session) -> None:
    started = fresh.execute("setsid sleep 777 >/dev/null 2>&1 < /dev/null & echo ok", timeout_s=5)
    assert started.exit_code == 0
    stopped = fresh.execute("setsid sleep 1001 & sleep 1000", timeout_s=1.5)
    assert stopped.timed_out
    assert stopped.stray_processes_killed >= 1
    left = user_processes(fresh)
    assert len(left) == 1
    assert "sleep 777" in left[0]


def test_a_daemon_an_earlier_command_forks_late_survives_a_later_timeout(fresh: Session) -> None:
    # The daemon is born while the later command runs, so its pid is above that command's
    # start: only its environment (the earlier command's SANDBOX_COMMAND) tells them apart.
    late = "(sleep 0.5; setsid sleep 778 >/dev/null 2>&1 </dev/null &) >/dev/null 2>&1 &"
    assert fresh.execute(f"{late} echo ok", timeout_s=5).exit_code == 0
    stopped = fresh.execute("setsid sleep 1002 & sleep 1000", timeout_s=1.5)
    assert stopped.timed_out
    assert stopped.stray_processes_killed >= 1
    left = user_processes(fresh)
    assert any("sleep 778" in line for line in left), left
    assert not any("sleep 100" in line for line in left), left


def test_killing_pid_1_or_the_container_from_inside_fails(fresh: Session) -> None:
    result = fresh.execute(
        "kill -9 1 2>&1; kill -KILL -1 2>/dev/null; echo unreachable", timeout_s=10
    )
    # kill -1 takes the shell down with everything else of its user: a fresh shell answers
    assert result.shell_restarted or "unreachable" in result.output
    assert not result.shell_exited
    works(fresh)
    assert fresh.backend.inspect(fresh.container_id).status == "running"


def test_a_shell_killed_by_its_own_command_is_replaced(fresh: Session) -> None:
    fresh.execute("cd /tmp; export GONE=1", timeout_s=5)
    result = fresh.execute("kill -9 $$", timeout_s=10)
    assert result.shell_restarted
    assert not result.shell_exited
    after = fresh.execute("pwd; echo ${GONE:-unset}", timeout_s=10)
    assert after.output == "/workspace\nunset\n"  # a fresh shell, in the same container


SABOTAGE = {
    "stdout-to-devnull": "exec >/dev/null",
    "stdout-to-devnull-stderr-kept": "exec 2>&1 >/dev/null",
    "unset-start-function": "unset -f __sb_s",
    "unset-end-function": "unset -f __sb_e",
    "clobber-nonce": "__sb_e() { :; }",
    "reexec-plain-bash": "exec bash --norc --noprofile",
}


@pytest.mark.parametrize("name", sorted(SABOTAGE))
def test_a_sabotaged_shell_is_detected_and_replaced(fresh: Session, name: str) -> None:
    first = fresh.execute(SABOTAGE[name], timeout_s=4)
    follow = fresh.execute("echo after", timeout_s=4)
    results = [first, follow]
    assert any(r.shell_restarted for r in results), results
    assert not any(r.still_running or r.shell_exited for r in results), results
    works(fresh)
    assert fresh.shell_restarts >= 1


TERMINAL_TRICKS = {
    "stty-raw-noecho": "stty raw -echo",
    "stty-no-isig": "stty -isig",
    "prompt-command-cleared": "PROMPT_COMMAND=",
    "prompt-command-exits": "PROMPT_COMMAND='(exit 3)'",
    "ps1-cleared": "PS1=",
    "trap-int-in-shell": "trap '' INT",
}


@pytest.mark.parametrize("name", sorted(TERMINAL_TRICKS))
def test_terminal_and_prompt_tricks_do_not_break_execute_or_timeouts(
    fresh: Session, name: str
) -> None:
    fresh.execute(TERMINAL_TRICKS[name], timeout_s=5)
    out = fresh.execute("printf 'a\\nb\\n'; (exit 4)", timeout_s=5)
    assert out.output == "a\nb\n"
    assert out.exit_code == 4
    stuck = fresh.execute("sleep 1000", timeout_s=1.5)
    assert stuck.timed_out
    assert not stuck.still_running
    works(fresh)


def test_set_e_ends_the_shell_visibly_instead_of_hanging(fresh: Session) -> None:
    fresh.execute("set -e", timeout_s=5)
    result = fresh.execute("false", timeout_s=5)
    assert result.shell_exited
    assert not result.timed_out
    revived = fresh.execute("echo x", timeout_s=5)  # a fresh shell in the same container
    assert revived.output == "x\n"
    assert revived.shell_restarted


@pytest.mark.parametrize(
    ("command", "exit_code", "output"),
    [
        ("echo 'never closed", 2, None),
        ('echo "never closed', 2, None),
        ("echo $'\\x27", 2, None),
        ("cat <<EOF\nline\n", 0, "line\n"),
        ("cat <<'EOF'\n$HOME\nEOS\n", 0, "$HOME\nEOS\n"),
        ("if true; then echo open", 2, None),
        ("echo `unfinished", None, None),
        ("echo $(unfinished", None, None),
    ],
)
def test_unterminated_quotes_and_heredocs_are_errors_not_hangs(
    shared: Session, command: str, exit_code: int | None, output: str | None
) -> None:
    result = shared.execute(command, timeout_s=5)
    assert not result.timed_out
    assert not result.still_running
    assert result.exit_code == exit_code if exit_code is not None else result.exit_code != 0
    if output is not None:
        assert result.output.endswith(output)
    works(shared)


FORGED = (
    "\\033]777;sb;deadbeefdeadbeef;E;0\\007"  # an end marker with a wrong nonce
    "\\033]777;sb;deadbeefdeadbeef;S;1\\007"  # a start marker
    "\\033]777;sb;P\\007"  # a prompt marker
    "\\033]777;sb;ready;1\\007"  # a ready marker naming PID 1 as the shell
    "\\033]777;sb;exit;0\\007"  # an exit marker
)


def test_markers_in_file_contents_cannot_end_or_redirect_a_command(fresh: Session) -> None:
    fresh.execute(f"printf '{FORGED}forged\\n' > forged.txt", timeout_s=5)
    result = fresh.execute("cat forged.txt; sleep 1; echo real-end; (exit 5)", timeout_s=10)
    assert result.output == "forged\nreal-end\n"
    assert result.exit_code == 5
    assert not result.shell_restarted
    # the forged ready marker did not change which process the ladder signals
    stuck = fresh.execute("cat forged.txt; trap '' INT; sleep 1000", timeout_s=2)
    assert stuck.timed_out
    assert "SIGTERM" in stuck.signals_sent or "SIGKILL" in stuck.signals_sent
    assert not stuck.session_reset
    works(fresh)
    # the forged exit marker did not stop a killed shell from being replaced
    assert fresh.execute("cat forged.txt; kill -9 $$", timeout_s=10).shell_restarted
