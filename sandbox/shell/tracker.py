"""The marker protocol's state: fed the shell's bytes with their log offset, it knows which
command runs, where its output starts and ends, its exit code, and whether the shell is ready,
at its prompt, lost or gone.

Pure: no thread, no engine, no clock but the one it is given. ``feed(data, offset)`` returns
what happened in those bytes as events; the session's reader thread feeds it under the session's
lock, and every other use of it holds that lock too.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from sandbox.shell.markers import Marker, MarkerScanner


@dataclass
class Pending:
    """The command the shell is running (or was)."""

    nonce: str
    sent_at: float
    start: int | None = None  # offset just after the start marker
    end: int | None = None  # offset of the end marker
    after: int | None = None  # offset just after the end marker
    exit_code: int | None = None
    newlines: int = 0
    sent_offset: int = 0  # log size when the line was typed: the echo starts here
    display: bytes = b""  # what the screen shows instead of the protocol line
    prompt_end: int | None = None  # just after the first prompt marker following the end
    pressure: str = ""  # pids pressure the shell cleared before it ran (the start marker's)

    @property
    def finished(self) -> bool:
        return self.end is not None


@dataclass(frozen=True)
class CommandStarted:
    """The running command's start marker: the screen shows ``shown`` for the protocol line
    typed at ``echo_from`` (up to the marker at ``echo_to``)."""

    echo_from: int
    echo_to: int
    shown: bytes


@dataclass(frozen=True)
class CommandEnded:
    status: int
    end: int  # offset of the end marker


@dataclass(frozen=True)
class PromptDrawn:
    end: int  # just after the prompt marker


@dataclass(frozen=True)
class ShellReady:
    pid: int


@dataclass(frozen=True)
class ShellExited:
    status: int | None


ShellEvent = CommandStarted | CommandEnded | PromptDrawn | ShellReady | ShellExited


class CommandTracker:
    """What the shell's markers say, kept up to date by ``feed``."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._scanner = MarkerScanner()
        self.pending: Pending | None = None
        self.shell_pid: int | None = None
        self.token: str | None = None  # in the ready and exit markers; None: accept any
        self.prompt_seen = True
        self.prompt_marker_works = True
        self.exit_marker: int | None = None  # the shell's exit marker came, with this status
        self.last_exit_code: int | None = None
        # (nonce, ns_last_pid when it started) of the last command whose start marker came
        self.start_pid: tuple[str, int | None] | None = None
        # when (and at which offset) a prompt marker came while the pending command had no end
        self.lost_since: float | None = None
        self.lost_prompt: int | None = None
        self.idle_bytes = 0  # output while no command ran (a background job writing)

    # -- what the shell does -------------------------------------------------------------
    def new_shell(self, token: str | None, *, adopted: tuple[int, Pending | None] | None) -> None:
        """A fresh shell (or, ``adopted``: its pid and unfinished command, one found again in
        tmux) is attached: forget the last one's protocol state."""
        self._scanner = MarkerScanner()
        self.token = token
        self.pending = None
        self.shell_pid = None
        self.prompt_seen = False
        if adopted is not None:
            self.shell_pid, self.pending = adopted
            self.prompt_seen = True

    def begin(self, nonce: str, *, sent_offset: int, display: bytes) -> Pending:
        """The protocol line of a new command is about to be typed at ``sent_offset``."""
        p = Pending(nonce=nonce, sent_at=self._clock(), sent_offset=sent_offset, display=display)
        self.pending = p
        self.prompt_seen = False
        self.lost_since = self.lost_prompt = None
        return p

    @property
    def running(self) -> bool:
        """A command was typed and its end marker has not come."""
        return self.pending is not None and not self.pending.finished

    def take_idle_bytes(self) -> int:
        """Bytes printed while no command ran, since the last call."""
        count, self.idle_bytes = self.idle_bytes, 0
        return count

    def start_pid_of(self, p: Pending) -> int | None:
        """The pid namespace's last pid just before command ``p`` started (None: unknown)."""
        known = self.start_pid
        return known[1] if known is not None and known[0] == p.nonce else None

    # -- the bytes -----------------------------------------------------------------------
    def feed(self, data: bytes, offset: int) -> list[ShellEvent]:
        """Take the shell's bytes ``data`` found at log ``offset``; say what they did."""
        p = self.pending
        if p is None or p.finished:
            self.idle_bytes += len(data)
        events: list[ShellEvent] = []
        counted_from = offset
        for m in self._scanner.scan(data, offset):
            if m.kind == "start" and p is not None and m.nonce == p.nonce:
                counted_from = m.end
                events.append(self._started(p, m))
            elif m.kind == "end" and p is not None and m.nonce == p.nonce and p.end is None:
                if p.start is None:  # interrupted before it started: empty output
                    p.start = m.start
                p.newlines += data.count(b"\n", max(0, counted_from - offset), m.start - offset)
                events.append(self._ended(p, m))
            elif m.kind == "prompt":
                events.append(self._prompt(p, m))
            elif m.kind == "ready" and self.shell_pid is None and self.genuine(m):
                # only the shell's first: a later one was printed by a program (a file)
                with contextlib.suppress(ValueError):
                    self.shell_pid = int(m.nonce)
                    events.append(ShellReady(self.shell_pid))
                self.prompt_seen = False
                self.exit_marker = None
            elif m.kind == "exit" and self.genuine(m):
                self.exit_marker = m.status
                events.append(ShellExited(m.status))
        if p is not None and p.start is not None and p.end is None:
            p.newlines += data.count(b"\n", max(0, p.start - offset, counted_from - offset))
        return events

    def genuine(self, marker: Marker) -> bool:
        """A ready or exit marker the shell printed, not a program (or a file it printed)."""
        return self.token is None or marker.token == self.token

    def _started(self, p: Pending, m: Marker) -> CommandStarted:
        p.start = m.end
        p.pressure = m.pressure
        self.start_pid = (m.nonce, m.last_pid)
        return CommandStarted(p.sent_offset, m.start, p.display)

    def _ended(self, p: Pending, m: Marker) -> CommandEnded:
        assert m.status is not None
        p.end, p.after, p.exit_code = m.start, m.end, m.status
        self.last_exit_code = m.status
        self.prompt_seen = False
        self.exit_marker = None  # the shell lives on: an exit marker was forged
        return CommandEnded(m.status, m.start)

    def _prompt(self, p: Pending | None, m: Marker) -> PromptDrawn:
        self.exit_marker = None  # the shell lives on: an exit marker was forged
        if p is not None and p.end is None and m.start >= p.sent_offset:
            self.lost_since = self._clock()
            if self.lost_prompt is None:
                self.lost_prompt = m.start
        self.prompt_seen = True
        self.prompt_marker_works = True
        if p is not None and p.finished and p.prompt_end is None:
            p.prompt_end = m.end
        return PromptDrawn(m.end)


def unfinished_command(tail: bytes, base: int, *, sent_at: float) -> Pending | None:
    """In the log's ``tail`` (found at offset ``base``): the command whose start marker came
    but not its end (a durable shell found again after a restart)."""
    last_start = None
    for m in MarkerScanner().scan(tail, base):
        if m.kind == "start":
            last_start = m
        elif m.kind == "end" and last_start is not None and m.nonce == last_start.nonce:
            last_start = None
    if last_start is None:
        return None
    p = Pending(nonce=last_start.nonce, sent_at=sent_at, start=last_start.end)
    p.newlines = tail[last_start.end - base :].count(b"\n")
    return p
