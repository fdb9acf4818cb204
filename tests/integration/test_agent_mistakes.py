"""Agents make mistakes; a session survives them.

Each case is something an agent's command really does to its own shell or session (ends it,
replaces it, redirects it, breaks its PATH, leaves a program open, floods, fills the pids
limit...). Each is followed by a plain ``execute`` that must answer exactly (the right output
and exit code 0) within a few seconds, bounded by that execute's own timeout, never by a timer
in the test. Where the session had to repair itself (a fresh shell, a suspended program, a
cleared pids limit), the result says so in ``notices``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from sandbox.models import CreateRequest, ExecResult
from sandbox.session.manager import SessionManager
from sandbox.session.session import Session
from tests.conftest import make_project

pytestmark = pytest.mark.docker

AFTER_S = 5  # the plain execute after a mistake answers within this (its own timeout)


@dataclass(frozen=True)
class Mistake:
    command: str
    timeout_s: float = 5
    idle_s: float | None = None  # the mistake leaves something running: return when quiet
    repaired: str | None = None  # a word the next result's notices must contain


MISTAKES: dict[str, Mistake] = {
    # the shell ends
    "exit": Mistake("exit", repaired="fresh shell"),
    "exit-with-code": Mistake("exit 7", repaired="fresh shell"),
    "set-e-then-fail": Mistake("set -e; false", repaired="fresh shell"),
    "exec-replaces-the-shell": Mistake("exec true", repaired="fresh shell"),
    "exec-another-shell": Mistake("exec bash --norc", repaired="fresh shell"),
    "kill-own-shell": Mistake("kill -9 $$", repaired="fresh shell"),
    "logout-of-login-shell": Mistake("logout 2>/dev/null || exit 2", repaired="fresh shell"),
    # the protocol is damaged
    "stdout-redirected-away": Mistake("exec >/dev/null", repaired="fresh shell"),
    "both-streams-redirected": Mistake("exec >/dev/null 2>&1", repaired="fresh shell"),
    "rc-functions-unset": Mistake("unset -f __sb_s __sb_e", repaired="fresh shell"),
    "prompt-command-cleared": Mistake("PROMPT_COMMAND="),
    "ps1-cleared": Mistake("PS1=''"),
    "printf-overridden": Mistake("printf() { :; }"),
    "echo-aliased-away": Mistake("alias echo=false; shopt -s expand_aliases"),
    "builtin-disabled": Mistake("enable -n echo"),
    "cd-overridden": Mistake("cd() { return 1; }"),
    "read-overridden": Mistake("read() { return 1; }; kill() { :; }"),
    "debug-trap-exits": Mistake("trap 'return 1' DEBUG; shopt -s extdebug"),
    "exit-trap-prints": Mistake("trap 'echo junk-on-exit' EXIT"),
    "int-ignored": Mistake("trap '' INT"),
    "ifs-changed": Mistake("IFS=:"),
    "set-u-and-pipefail": Mistake("set -uo pipefail"),
    "noglob-and-noclobber": Mistake("set -f -C"),
    "readonly-variable": Mistake("readonly SANDBOX_COMMAND=fixed"),
    # the environment is broken
    "path-broken": Mistake("PATH=/nonexistent"),
    "path-unset": Mistake("unset PATH"),
    "home-unset": Mistake("unset HOME; cd /"),
    "working-dir-deleted": Mistake("mkdir -p /tmp/gone && cd /tmp/gone && rmdir /tmp/gone"),
    "unreadable-dir": Mistake("mkdir -p /tmp/locked && chmod 000 /tmp/locked; cd /tmp/locked"),
    "histfile-junk": Mistake("HISTFILE=/proc/nope; HISTSIZE=-1"),
    "ulimit-files": Mistake("ulimit -n 8"),
    "umask-zero": Mistake("umask 777"),
    # the terminal is changed
    "stty-raw-noecho": Mistake("stty raw -echo"),
    "stty-no-canonical": Mistake("stty -icanon min 0"),
    "stty-no-signals": Mistake("stty -isig"),
    "terminal-reset-sequences": Mistake("printf '\\033c\\033[?1049h\\033[?25l'"),
    "binary-garbage": Mistake("head -c 4000 /dev/urandom"),
    # something is left running
    "repl-left-open": Mistake("python3", idle_s=1, repaired="suspended"),
    "cat-waiting-on-stdin": Mistake("cat", idle_s=1, repaired="suspended"),
    "editor-left-open": Mistake("vim notes.txt", idle_s=1, repaired="suspended"),
    "read-waiting": Mistake("read answer", idle_s=1, repaired="interrupted"),
    "pager-left-open": Mistake("less /etc/passwd", idle_s=1, repaired="suspended"),
    "background-flood": Mistake("yes flood &", repaired="background"),
    "fork-loop-in-background": Mistake("while :; do sleep 1000 & done &", repaired="pids limit"),
}


@pytest.fixture(scope="module")
def mistakes_manager(manager: SessionManager) -> SessionManager:
    return manager


@pytest.fixture
def session(manager: SessionManager) -> Iterator[Session]:
    project = make_project("mistake")
    created = manager.create(CreateRequest(project_path=str(project), pids=64))
    yield manager.get(created.session_id)
    manager.destroy(created.session_id, force=True)


def _wait_for_pids(session: Session, at_least: int) -> None:
    """Until the container holds ``at_least`` tasks (one exec per look: an exec joins the
    cgroup past its pids limit, a fork inside it cannot), for a minute at most: a loaded
    machine forks slowly."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for path in ("/sys/fs/cgroup/pids/pids.current", "/sys/fs/cgroup/pids.current"):
            got = session.backend.run(session.container_id, ["cat", path], user="65534:65534")
            if got.exit_code == 0:
                if int(got.output.decode().strip() or 0) >= at_least:
                    return
                break
    pytest.fail(f"the fork loop never reached {at_least} processes")


def _plain(session: Session, *, everything: bool = False) -> ExecResult:
    # Names a mistake may redefine on purpose (echo, cd, pwd) are reached past the redefinition:
    # the question is whether the session answers, not whether the agent's alias still works.
    result = session.execute(
        "builtin cd /workspace && /bin/echo plain-$((6*7)) && builtin pwd",
        timeout_s=AFTER_S,
        max_lines=-1 if everything else 200,
    )
    assert not result.timed_out, result
    return result


def _ok(result: ExecResult, *, flooded: bool = False) -> None:
    if flooded:  # a job still writes to the same terminal: our output is among its lines
        assert "plain-42" in result.output, result.output[-500:]
        assert "/workspace" in result.output, result.output[-500:]
    else:
        assert result.output.endswith("plain-42\n/workspace\n"), result
    assert result.exit_code == 0, result


def test_the_corpus_has_at_least_25_mistakes() -> None:
    assert len(MISTAKES) >= 25


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_a_plain_execute_answers_after_the_mistake(session: Session, name: str) -> None:
    mistake = MISTAKES[name]
    made = session.execute(
        mistake.command, timeout_s=mistake.timeout_s, idle_timeout_s=mistake.idle_s
    )
    if name == "fork-loop-in-background":  # the agent's next call comes once it is full
        _wait_for_pids(session, at_least=62)
    if name == "background-flood":  # the agent's next call comes a moment later
        start = session.log.size
        while session.log.size < start + 64 * 1024:
            session.wait_output(session.log.size, 1.0)
    flooded = name == "background-flood"
    first = _plain(session, everything=flooded)
    notices = " ".join(made.notices + first.notices)
    if mistake.repaired is not None:
        assert mistake.repaired in notices, (first.output, first.notices)
    _ok(first, flooded=flooded)
    _ok(_plain(session, everything=flooded), flooded=flooded)  # and the one after that


def test_session_info_reports_pids_pressure_before_the_next_execute_clears_it(
    manager: SessionManager, session: Session
) -> None:
    session.execute("while :; do sleep 1000 & done &", timeout_s=5)
    _wait_for_pids(session, at_least=62)
    info = manager.info(session.id)
    # the look inside is one exec: at the limit it may not start, and then says so
    assert info.usage.pids_max in (64, None)
    assert any("pids limit" in notice for notice in info.notices), info.notices
    cleared = _plain(session)
    _ok(cleared)
    assert any("pids limit" in notice for notice in cleared.notices)
    assert not any("pids limit" in n for n in manager.info(session.id).notices)
