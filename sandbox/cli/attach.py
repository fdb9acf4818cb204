"""The local terminal wired to a TTY in a container: ``sandbox shell`` and ``sandbox attach``.

The local tty goes into raw mode; keys go to the container byte for byte (so ^C, ^D, ^Z, arrows
and pastes mean there what they mean in any terminal), the container's bytes come back to the
screen, and SIGWINCH resizes the remote TTY. The bridge ends when the remote shell ends.

Two links exist:

- ``SessionLink``: a session's own shell. Its socket belongs to the session's reader thread
  (which records the raw log and answers terminal queries), so output is followed from the
  session's raw log and keys are written to its exec channel.
- ``ChannelLink``: a fresh TTY exec opened for ``attach``, read directly.

``attach`` finds a running session's container by label and opens a second shell in it, as the
session's user: look around, or take over, while the agent's own shell keeps its state.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Protocol

from sandbox.backends.base import ExecChannel
from sandbox.cli.console import PipeCleaner, RawTerminal, TerminalFilter, terminal_size
from sandbox.config import (
    LABEL_SESSION,
    LABEL_SPEC,
    SESSION_HOME,
    WORKSPACE,
)
from sandbox.errors import SandboxError, SessionExitedError
from sandbox.session.session import Session

OnBytes = Callable[[bytes], None]

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
_EOT = b"\x04"
ATTACH_ARGV = ["bash", "--norc", "-i"]
ATTACH_PS1 = r"sandbox(attached):\w\$ "


class Link(Protocol):
    """One remote TTY as the bridge sees it."""

    #: Whether the remote side answers terminal queries itself (then the local terminal must
    #: not see them, or both would answer).
    answers_queries: bool

    def write(self, data: bytes) -> None: ...

    def resize(self, rows: int, cols: int) -> None: ...

    def follow(self, on_bytes: OnBytes, stop: threading.Event) -> None:
        """Call ``on_bytes`` with output until the remote TTY ends or ``stop`` is set."""
        ...


class SessionLink:
    """A session's shell: output from its raw log, keys to its exec channel."""

    answers_queries = True

    def __init__(self, session: Session) -> None:
        self.session = session

    def write(self, data: bytes) -> None:
        self.session.write_raw(data)

    def resize(self, rows: int, cols: int) -> None:
        self.session.resize(rows, cols)

    def follow(self, on_bytes: OnBytes, stop: threading.Event) -> None:
        session = self.session
        offset = 0
        while True:
            end = session.wait_output(offset, 0.5)
            running = session.shell_alive
            if end > offset:
                on_bytes(session.log.read(offset, end))
                offset = end
            elif not running or stop.is_set():
                return


class ChannelLink:
    """A TTY exec read and written directly."""

    answers_queries = False

    def __init__(self, channel: ExecChannel) -> None:
        self.channel = channel

    def write(self, data: bytes) -> None:
        self.channel.write(data)

    def resize(self, rows: int, cols: int) -> None:
        self.channel.resize(rows, cols)

    def follow(self, on_bytes: OnBytes, stop: threading.Event) -> None:
        while not stop.is_set():
            data = self.channel.read(65536)
            if not data:
                return
            on_bytes(data)


def bridge(link: Link, *, stdin_fd: int = 0, stdout_fd: int = 1) -> int | None:
    """Connect the local terminal to ``link`` until its remote side ends.

    Returns the number of the signal (SIGTERM, SIGHUP, SIGINT) that ended it early, or None.
    """
    stop = threading.Event()
    stopped_by: list[int] = []
    ended = threading.Event()
    screen = _screen(link, stdout_fd, stop)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)

    def pump() -> None:
        try:
            link.follow(screen.feed, stop)
            screen.finish()
        except SandboxError:
            pass
        finally:
            ended.set()
            _wake(wake_w, b"e")

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if signum != signal.SIGWINCH:
            stopped_by.append(signum)
            stop.set()
        _wake(wake_w, b"s")

    previous = {sig: signal.signal(sig, on_signal) for sig in (*_STOP_SIGNALS, signal.SIGWINCH)}
    reader = threading.Thread(target=pump, name="sandbox-bridge", daemon=True)
    size = terminal_size(stdout_fd)
    try:
        with RawTerminal(stdin_fd):
            with contextlib.suppress(SandboxError):
                link.resize(*size)
            reader.start()
            _forward(link, size, stdin_fd, stdout_fd, wake_r, until=(ended, stop))
            stop.set()
            reader.join(timeout=2.0)
    finally:
        stop.set()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if not reader.is_alive():  # else it may still wake us: never let the fd be reused
            os.close(wake_r)
            os.close(wake_w)
    return stopped_by[0] if stopped_by else None


def _screen(link: Link, stdout_fd: int, stop: threading.Event) -> TerminalFilter | PipeCleaner:
    """Where the remote bytes go: the local terminal, or plain text when stdout is captured."""

    def write_out(data: bytes) -> None:
        try:
            _write_all(stdout_fd, data)
        except OSError:
            stop.set()

    if os.isatty(stdout_fd):
        return TerminalFilter(write_out, drop_queries=link.answers_queries)
    # output captured by a script: plain text, as `sandbox run` gives it
    return PipeCleaner(lambda text: write_out(text.encode("utf-8", "replace")))


def _forward(
    link: Link,
    size: tuple[int, int],
    stdin_fd: int,
    stdout_fd: int,
    wake_r: int,
    *,
    until: tuple[threading.Event, ...],
) -> None:
    """The bridge's loop: keys to ``link``, terminal resizes after each wake-up, until one of
    ``until`` is set (or the link refuses a write)."""
    stdin_open = True
    while not any(event.is_set() for event in until):
        fds = [wake_r, stdin_fd] if stdin_open else [wake_r]
        try:
            ready, _, _ = select.select(fds, [], [], 1.0)
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue
        if wake_r in ready:
            os.read(wake_r, 512)
            new_size = terminal_size(stdout_fd)
            if new_size != size:
                size = new_size
                with contextlib.suppress(SandboxError):
                    link.resize(*size)
        if stdin_open and stdin_fd in ready:
            data = _read(stdin_fd)
            if not data:  # end of input (a pipe): end the shell like ^D would
                stdin_open = False
                data = _EOT
            try:
                link.write(data)
            except SandboxError:
                return


def _wake(fd: int, why: bytes) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, why)


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError as exc:
        if exc.errno == errno.EIO:  # the terminal went away
            return b""
        raise


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [])
            continue
        view = view[n:]


def attach(ident: str) -> int:
    """``sandbox attach ID``: the session's own terminal when it is durable (its tmux, read-write;
    ctrl-b d detaches), else a second shell in the same container; the exit code."""
    from sandbox.backends import connect
    from sandbox.cli.inventory import find_container
    from sandbox.session.profile import spec_from_label

    backend = connect()
    state = find_container(backend, ident)
    if not state.running:
        raise SessionExitedError(
            f"session {ident}'s container is {state.status}",
            hint="`sandbox logs ID` shows what it did; `sandbox gc` removes it.",
        )
    spec = spec_from_label(state.labels.get(LABEL_SPEC, ""))
    if spec is None:
        raise SessionExitedError(
            f"container {state.id[:12]} has no readable {LABEL_SPEC} label, so its shell's "
            "user is unknown (a sandbox older than this one made it)",
            hint="`sandbox logs ID` still shows what it did; `sandbox kill ID` removes it.",
        )
    rows, cols = terminal_size(1)
    channel = backend.exec_attach(
        state.id,
        _attach_argv(to_tmux=spec.durable),
        user=spec.user,
        env={
            "HOME": SESSION_HOME,
            "TERM": "xterm-256color",
            "LANG": "C.UTF-8",
            "PS1": ATTACH_PS1,
            "SANDBOX_SESSION": state.labels.get(LABEL_SESSION, ""),
        },
        workdir=WORKSPACE,
        rows=rows,
        cols=cols,
    )
    try:
        signum = bridge(ChannelLink(channel))
    finally:
        channel.close()
    code = channel.exit_code()
    if signum is not None:
        return 128 + signum
    return code if code is not None else 1


def _attach_argv(*, to_tmux: bool) -> list[str]:
    """What ``attach`` runs: the session's tmux when it is durable, else a second shell (and
    a line on stderr that says which)."""
    from sandbox.shell import durable

    if to_tmux:
        print(
            "sandbox: attached to the agent's terminal (tmux); ctrl-b d detaches",
            file=sys.stderr,
        )
        return durable.tmux("attach-session", "-t", durable.SESSION)
    print(
        "sandbox: a second shell in the session's container; the agent's own terminal is "
        "not shared (sessions created with durable=true can be attached to)",
        file=sys.stderr,
    )
    return ATTACH_ARGV
