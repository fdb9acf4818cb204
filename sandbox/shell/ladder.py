"""The escalation ladder: how anything that hangs is stopped (DESIGN.md §5).

^C on the TTY -> SIGTERM to the foreground process group -> SIGKILL -> when even an exec cannot
start (a fork bomb filled the pids limit) the container is killed and started again. Each rung
waits a grace period for the job to end before the next one. When nothing runs in front of the
shell and its end marker still does not come (the agent redirected the shell's output, unset
its functions, re-executed it), the shell is replaced by a fresh one in the same container
instead: the container and its other processes survive. Signals are sent inside the
container as the shell's user: with every capability dropped, root could not signal it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from sandbox.errors import SandboxError

log = logging.getLogger(__name__)

SIGNAL_NUMBERS: dict[str, int] = {
    "HUP": 1,
    "INT": 2,
    "QUIT": 3,
    "KILL": 9,
    "USR1": 10,
    "USR2": 12,
    "TERM": 15,
    "CONT": 18,
    "TSTP": 20,
}


class Target(Protocol):
    """What the ladder needs from a session (or from one job of it: ``JobTarget``)."""

    def interrupt(self) -> None:
        """Type ^C into the terminal."""
        ...

    def foreground_pgid(self) -> int | None:
        """The foreground process group, or None when the shell itself is in front.

        Raises ``SandboxError`` when no control command can run (pids limit reached)."""
        ...

    def signal_group(self, pgid: int, signal: str) -> bool:
        """Send ``signal`` to group ``pgid``; False when the control command could not run."""
        ...

    def wait_done(self, grace_s: float) -> bool:
        """Wait up to ``grace_s`` for the job to end; True when it did. May raise
        ``SandboxError`` when it cannot look (the ladder then resets the container)."""
        ...

    def resync(self) -> None:
        """The shell itself is in front: end the command from its prompt (lost marker)."""
        ...

    def respawn(self) -> bool:
        """Replace the shell with a fresh one in the same container; False when not possible."""
        ...

    def reset(self) -> None:
        """Kill and restart the container, then reopen the shell."""
        ...


@dataclass
class Escalation:
    stopped: bool = False
    signals_sent: list[str] = field(default_factory=list)
    reset: bool = False
    shell_restarted: bool = False


class JobTarget:
    """One foreground job of a session, for the ``signal`` tool: it is done when the
    terminal's foreground group is no longer ``pgid`` (a program started with ``send`` has no
    end marker to wait for), and the shell is never resynced or replaced for it."""

    def __init__(
        self,
        session: Target,
        pgid: int,
        *,
        poll_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.session, self.pgid = session, pgid
        self._poll_s, self._clock, self._sleep = poll_s, clock, sleep

    def interrupt(self) -> None:
        self.session.interrupt()

    def foreground_pgid(self) -> int | None:
        return self.pgid if self.session.foreground_pgid() == self.pgid else None

    def signal_group(self, pgid: int, signal: str) -> bool:
        return self.session.signal_group(pgid, signal)

    def wait_done(self, grace_s: float) -> bool:
        deadline = self._clock() + grace_s
        while self._clock() < deadline:
            if self.session.foreground_pgid() != self.pgid:
                return True
            self._sleep(self._poll_s)
        return False

    def resync(self) -> None:
        return None

    def respawn(self) -> bool:
        return False

    def reset(self) -> None:
        self.session.reset()


LADDER = ("INT", "TERM", "KILL")
Outcome = Literal["stopped", "exhausted", "blind"]


def rungs(start: str) -> list[str]:
    """The signals from ``start`` on: a rung of the ladder, or another signal before it."""
    return list(LADDER[LADDER.index(start) :]) if start in LADDER else [start, *LADDER]


def escalate(
    target: Target,
    *,
    start: str = "INT",
    grace_s: float = 1.0,
    use_tty: bool = True,
    last_resort: bool = True,
) -> Escalation:
    """Stop the foreground job, harder and harder, until it is gone.

    ``use_tty``: the INT rung is ^C typed into the terminal (else a signal to the group).
    When no control command can run or no signal can be sent, the container is reset; when
    every rung was tried and the job is still there, it is reset only with ``last_resort``."""
    result = Escalation()
    try:
        outcome = _climb(target, result, rungs(start), grace_s, use_tty)
    except SandboxError as exc:
        log.warning("cannot look into the session (%s): resetting the container", exc)
        outcome = "blind"
    if outcome == "stopped" or (outcome == "exhausted" and not last_resort):
        result.stopped = outcome == "stopped"
        return result
    target.reset()
    result.reset = True
    result.stopped = True
    return result


def _climb(
    target: Target, result: Escalation, signals: list[str], grace_s: float, use_tty: bool
) -> Outcome:
    for sig in signals:
        if sig == "INT" and use_tty:
            target.interrupt()
            result.signals_sent.append("SIGINT")
            if target.wait_done(grace_s):
                return "stopped"
            continue
        pgid = target.foreground_pgid()
        if pgid is None:
            return _shell_in_front(target, result, grace_s)
        if not target.signal_group(pgid, sig):
            log.warning("cannot signal group %s: resetting the container", pgid)
            return "blind"
        result.signals_sent.append(f"SIG{sig}")
        if target.wait_done(grace_s):
            return "stopped"
    return "exhausted"


def _shell_in_front(target: Target, result: Escalation, grace_s: float) -> Outcome:
    """Nothing in front of the shell: the job ended, its end marker was lost (the prompt is
    idle), or the shell itself is looping in a builtin."""
    if target.wait_done(grace_s / 4):
        return "stopped"
    target.resync()
    if target.wait_done(grace_s):
        return "stopped"
    if target.respawn():  # the shell idles but its markers are lost: a new shell
        result.shell_restarted = True
        return "stopped"
    return "blind"
