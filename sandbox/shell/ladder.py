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
from dataclasses import dataclass, field
from typing import Protocol

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
    """What the ladder needs from a session."""

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
        """Wait up to ``grace_s`` for the job to end; True when it did."""
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


def escalate(
    target: Target, *, start: str = "INT", grace_s: float = 1.0, use_tty: bool = True
) -> Escalation:
    """Stop the foreground job, harder and harder, until it is gone."""
    result = Escalation()
    ladder = ["INT", "TERM", "KILL"]
    rungs = ladder[ladder.index(start) :] if start in ladder else [start, *ladder]
    for sig in rungs:
        if sig == "INT" and use_tty:
            target.interrupt()
            result.signals_sent.append("SIGINT")
            if target.wait_done(grace_s):
                result.stopped = True
                return result
            continue
        try:
            pgid = target.foreground_pgid()
        except SandboxError as exc:
            log.warning("cannot look into the session (%s): resetting the container", exc)
            break
        if pgid is None:
            # Nothing in front of the shell: the job ended, its end marker was lost (the
            # prompt is idle), or the shell itself is looping in a builtin.
            if target.wait_done(grace_s / 4):
                result.stopped = True
                return result
            target.resync()
            if target.wait_done(grace_s):
                result.stopped = True
                return result
            if target.respawn():  # the shell idles but its markers are lost: a new shell
                result.shell_restarted = True
                result.stopped = True
                return result
            break
        if not target.signal_group(pgid, sig):
            log.warning("cannot signal group %s: resetting the container", pgid)
            break
        result.signals_sent.append(f"SIG{sig}")
        if target.wait_done(grace_s):
            result.stopped = True
            return result
    target.reset()
    result.reset = True
    result.stopped = True
    return result
