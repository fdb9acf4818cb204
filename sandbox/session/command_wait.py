"""Waiting for a command to end: its end marker, or a timeout, an idle stretch, a cancel, a
lost protocol, a container gone; meanwhile its output streams and its progress is reported.
``ExecOptions`` says how one execute runs.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

from sandbox.errors import SandboxError, SessionNotFoundError
from sandbox.session.input_watch import InputCheck
from sandbox.session.output import OutputFn, OutputStreamer
from sandbox.session.shell_link import ShellLink
from sandbox.shell.tracker import Pending
from sandbox.terminal.stream import clean_transcript

ProgressFn = Callable[[float, str], None]

PROGRESS_EVERY_S = 1.0
# A prompt marker arrived but not the command's end marker: the shell is idle at its prompt and
# its protocol is broken (stdout redirected, functions unset). Check after this much quiet.
LOST_QUIET_S = 0.3
# While a command is quiet this long, ask the engine whether the container still runs: a
# container that died (a gVisor sandbox killed or out of memory) may leave its exec socket open,
# and the reader would wait on it until the command's timeout.
LIVENESS_EVERY_S = 2.0


class ExecKeywords(TypedDict, total=False):
    """The optional keywords of ``Session.execute`` and ``SessionManager.execute`` (their
    defaults are ``ExecOptions``'s)."""

    idle_timeout_s: float | None
    background: bool
    max_lines: int
    strip_ansi: bool
    progress: ProgressFn | None
    cancel: threading.Event | None
    on_output: OutputFn | None


@dataclass(frozen=True)
class ExecOptions:
    """How one ``execute`` runs: its timeout and ``ExecKeywords``."""

    timeout_s: float
    idle_timeout_s: float | None = None
    background: bool = False
    max_lines: int = 200
    strip_ansi: bool = True
    progress: ProgressFn | None = None
    cancel: threading.Event | None = None
    on_output: OutputFn | None = None

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    @property
    def idle_after_s(self) -> float | None:
        """The quiet stretch that ends the wait (a background command's defaults to 1 s)."""
        if self.background and self.idle_timeout_s is None:
            return 1.0
        return self.idle_timeout_s


def wait_for_end(
    link: ShellLink,
    p: Pending,
    deadline: float,
    options: ExecOptions,
    stream: OutputStreamer | None,
    check: InputCheck | None = None,
) -> str:
    """Wait until the command ends or another outcome is due ("input": with ``check``, its
    program waits for terminal input); meanwhile stream its output, report progress and
    check that the container still runs."""
    next_progress = time.monotonic() + PROGRESS_EVERY_S
    next_check = time.monotonic() + LIVENESS_EVERY_S
    while True:
        outcome = _next_outcome(
            link, p, deadline, options, stream, next_progress, next_check, check
        )
        if outcome is not None:
            return outcome
        if check is not None and check.waits(p):
            return "input"
        if time.monotonic() >= next_check:
            quiet = time.monotonic() - link.last_output >= LIVENESS_EVERY_S
            next_check = time.monotonic() + LIVENESS_EVERY_S
            if quiet and _container_gone(link):
                link.drop_channel()  # the reader ends; the loop sees the shell gone
        if stream is not None:
            stream.flush()
        if options.progress is not None and time.monotonic() >= next_progress:
            next_progress = time.monotonic() + PROGRESS_EVERY_S
            with contextlib.suppress(Exception):
                options.progress(time.monotonic() - p.sent_at, _last_line(link, p))


def _next_outcome(
    link: ShellLink,
    p: Pending,
    deadline: float,
    options: ExecOptions,
    stream: OutputStreamer | None,
    next_progress: float,
    next_check: float,
    check: InputCheck | None = None,
) -> str | None:
    """Sleep on ``cond`` until the wait ends (its outcome) or something is due (None)."""
    idle_after = options.idle_after_s
    # streaming and the input check look at every chunk; the rest only at marker events
    every = stream is not None or check is not None
    with link.cond, link.pacing.every_chunk() if every else contextlib.nullcontext():
        while True:
            now = time.monotonic()
            if p.finished:
                return "done"
            if not link.alive:
                return "exited"
            if options.cancelled:
                return "cancelled"
            if now >= deadline:
                return "background" if options.background else "timeout"
            wake = deadline if options.progress is None else min(deadline, next_progress)
            lost_since = link.tracker.lost_since
            if lost_since is not None:
                quiet_from = max(lost_since, link.last_output)
                if now - quiet_from >= LOST_QUIET_S:
                    return "lost"
                wake = min(wake, quiet_from + LOST_QUIET_S)
            if idle_after is not None:
                # output the reader holds back (its pacing) is not a quiet program
                quiet_since = max(link.quiet_since(), p.sent_at)
                if options.background and p.start is not None and link.log.size <= p.start:
                    quiet_since = now  # background: wait for some output first
                if now - quiet_since >= idle_after:
                    return "idle"
                wake = min(wake, quiet_since + idle_after)
            if options.cancel is not None:
                wake = min(wake, now + 0.1)
            ask_at = None if check is None else check.ask_at(p)  # time to ask the kernel
            if ask_at is not None:
                if now >= ask_at:
                    return None
                wake = min(wake, ask_at)
            due = options.progress is not None and now >= next_progress
            if due or (stream is not None and stream.pending()) or now >= next_check:
                return None
            link.cond.wait(max(0.0, min(wake, next_check) - now))


def _container_gone(link: ShellLink) -> bool:
    """Whether the engine says the session's container no longer runs (one inspect)."""
    try:
        return link.backend.inspect(link.container_id).status != "running"
    except SessionNotFoundError:
        return True
    except SandboxError:
        return False  # the engine does not answer: that says nothing of the container


def _last_line(link: ShellLink, p: Pending) -> str:
    if p.start is None:
        return ""
    end = link.log.size
    text = clean_transcript(link.log.read(max(p.start, end - 4096), end))
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""
