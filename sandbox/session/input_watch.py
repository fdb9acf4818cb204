"""A session's second, long-lived exec that tells whether its foreground program waits for
terminal input (``sandbox.shell.input_wait``), and the pacing of those questions while an
``execute`` waits.

The exec is opened on first need, in a thread, so that its start overlaps the program's own;
until it answers, and wherever the kernel does not say (gVisor), ``execute`` keeps the silence
rule alone.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from sandbox.backends.base import ExecChannel
from sandbox.errors import SandboxError
from sandbox.session.shell_link import ShellLink
from sandbox.shell.input_wait import WATCH_SCRIPT, Verdict, parse_answer
from sandbox.shell.tracker import Pending

log = logging.getLogger(__name__)

ANSWER_TIMEOUT_S = 0.5
QUIET_BEFORE_ASK_S = 0.005  # ask once output has paused this long
SETTLE_S = 0.005  # after "input": bytes the program wrote before it blocked are still arriving
SHELL_CONFIRM_S = 0.1  # the shell in front may be at its prompt: its end marker is on the way
BACKOFF_S = (0.03, 0.06, 0.12, 0.25, 0.5)  # while quiet and not waiting, ask less and less often
RETRY_ASK_S = 0.02  # while the watcher starts
RETRY_OPEN_S = 5.0  # after the watcher could not start (a container being reset, the pids limit)


class InputWatch:
    """The watcher exec of one session. Thread-safe; ``ask`` never raises."""

    def __init__(self, open_channel: Callable[[], ExecChannel], name: str) -> None:
        self._open_channel = open_channel
        self._name = name
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._channel: ExecChannel | None = None
        self._opening = False
        self._closed = False
        self._seq = 0
        self._answers: dict[int, Verdict] = {}
        self._unsupported = False
        self._failed_at = -RETRY_OPEN_S

    def start(self) -> None:
        """Open the watcher in the background unless it is open, opening, or cannot say."""
        with self._lock:
            if self._channel is not None or self._opening or self._closed or self._unsupported:
                return
            if time.monotonic() - self._failed_at < RETRY_OPEN_S:
                return
            self._opening = True
        threading.Thread(target=self._open, name=f"sandbox-input-{self._name}", daemon=True).start()

    def _open(self) -> None:
        try:
            channel = self._open_channel()
        except SandboxError as exc:
            log.debug("session %s: no input watcher: %s", self._name, exc.message)
            channel = None
        with self._cond:
            self._opening = False
            if channel is None or self._closed:
                if channel is None:
                    self._failed_at = time.monotonic()
                else:
                    channel.close()
                return
            self._channel = channel
            self._cond.notify_all()
        self._read(channel)

    def _read(self, channel: ExecChannel) -> None:
        buffer = b""
        while True:
            try:
                data = channel.read(4096)
            except (OSError, SandboxError):
                data = b""
            if not data:
                break
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            with self._cond:
                for line in lines:
                    answer = parse_answer(line.decode("ascii", "replace"))
                    if answer is not None:
                        self._answers[answer[0]] = answer[1]
                self._cond.notify_all()
        with contextlib.suppress(SandboxError, OSError):
            channel.close()
        with self._cond:
            if self._channel is channel:
                self._channel = None  # reopened on next need (a reset container ended it)
            self._cond.notify_all()

    def ask(self, shell_pid: int) -> Verdict | None:
        """What the kernel says of the foreground program (None: no watcher yet, no answer)."""
        with self._cond:
            channel = self._channel
            if channel is None or self._unsupported:
                return None
            self._seq += 1
            seq = self._seq
        try:
            channel.write(f"{seq} {int(shell_pid)}\n".encode())
        except SandboxError:
            return None
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        with self._cond:
            while seq not in self._answers and self._channel is channel:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
            verdict = self._answers.pop(seq, None)
            self._answers.clear()  # late answers to questions given up on
            if verdict == "unknown":
                self._unsupported = True  # this kernel does not say: stop asking
                log.info(
                    "session %s: the kernel does not say who reads the terminal "
                    "(gVisor?): idle returns go by silence alone",
                    self._name,
                )
            return verdict

    @property
    def unsupported(self) -> bool:
        return self._unsupported

    def close(self) -> None:
        with self._lock:
            self._closed = True
            channel, self._channel = self._channel, None
        if channel is not None:
            with contextlib.suppress(SandboxError, OSError):
                channel.close()


class InputPacer:
    """When one waiting ``execute`` asks next: after output pauses, then backing off while the
    program stays quiet and not waiting (fresh output starts over)."""

    def __init__(self) -> None:
        self._asked_output = -1.0  # the last-output time seen at the last question
        self._tries = 0
        self._next = 0.0

    def due_at(self, last_output: float) -> float:
        """The monotonic time of the next question, given when output last arrived."""
        if last_output != self._asked_output:
            return last_output + QUIET_BEFORE_ASK_S
        return self._next

    def retry(self, last_output: float, now: float) -> None:
        """No answer (the watcher is still starting): ask again shortly, without backing off."""
        if last_output != self._asked_output:
            self._asked_output, self._tries = last_output, 0
        self._next = now + RETRY_ASK_S

    def asked(self, last_output: float, now: float) -> None:
        if last_output != self._asked_output:
            self._asked_output, self._tries = last_output, 0
        self._next = now + BACKOFF_S[min(self._tries, len(BACKOFF_S) - 1)]
        self._tries += 1


def open_watcher(link: ShellLink) -> ExecChannel:
    """Start the watcher exec in ``link``'s container, as the shell's user."""
    return link.backend.exec_attach(
        link.container_id,
        ["bash", "-c", WATCH_SCRIPT],
        user=link.spec.user,
        env={},
        workdir=link.spec.workdir,
        rows=link.spec.rows,
        cols=link.spec.cols,
    )


class InputCheck:
    """For one waiting ``execute``: whether it is time to ask, and whether its program waits
    for terminal input (only when nothing arrived meanwhile: what it wrote before blocking
    is then in the log). Output the reader holds back (``ReadPacing.holding_back``) is output
    still arriving: no question while it waits."""

    def __init__(
        self, watch: InputWatch, link: ShellLink, wait_done: Callable[[float], bool]
    ) -> None:
        self._watch = watch
        self._link = link
        self._wait_done = wait_done  # True once the command ended (within the given seconds)
        self._pacer = InputPacer()
        watch.start()

    def ask_at(self, p: Pending) -> float | None:
        """When to ask next (None: the command has not started, its output is held back, or
        this kernel cannot say)."""
        link = self._link
        if p.start is None or link.tracker.shell_pid is None or self._watch.unsupported:
            return None
        if link.pacing.holding_back:
            return None
        return self._pacer.due_at(link.quiet_since())

    def waits(self, p: Pending) -> bool:
        """Ask, if it is time, whether the command's program waits for terminal input."""
        ask_at = self.ask_at(p)
        shell = self._link.tracker.shell_pid
        if ask_at is None or shell is None or time.monotonic() < ask_at:
            return False
        before, quiet = self._link.last_output, self._link.quiet_since()
        verdict = self._watch.ask(shell)
        if verdict is None:  # the watcher is still starting (or did not answer): soon again
            self._pacer.retry(quiet, time.monotonic())
            return False
        self._pacer.asked(quiet, time.monotonic())
        if verdict not in ("input", "shell"):
            return False
        # the shell in front may be back at its prompt, its end marker still on the way
        settle = SHELL_CONFIRM_S if verdict == "shell" else SETTLE_S
        if self._wait_done(settle) or self._link.last_output != before:
            return False
        return verdict == "input" or self._watch.ask(shell) == "shell"
