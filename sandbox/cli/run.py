"""``sandbox run``: one command in a throwaway session, streamed, with the command's exit code.

The session is created and the command executed in a worker thread while the main thread
handles signals: the first SIGINT / SIGTERM / SIGHUP interrupts the command in the box (^C, then
SIGTERM, then SIGKILL to its process group), a second one removes the container at once. Every
way out (done, signal, error, broken pipe) ends in removing every container this run created,
found by its ``sandbox.server`` label, so even a create cut short leaves nothing behind.

The command's stdin is ``/dev/null`` (as ``docker run`` without ``-i``): a prompt cannot hang a
CI job. Its stdout and stderr share the session's TTY, so programs keep their colours; they reach
a local terminal as is, and a pipe as plain text (``sandbox.cli.console``).
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import signal
import sys
import threading
from dataclasses import dataclass, field
from types import FrameType

from sandbox.cli.console import PipeCleaner, TerminalFilter, silence_stdout, terminal_size
from sandbox.config import LABEL_MANAGED, LABEL_SERVER
from sandbox.errors import SandboxError
from sandbox.models import CreateRequest, ExecResult
from sandbox.session.manager import SessionManager

log = logging.getLogger(__name__)

EXIT_TIMEOUT = 124  # as timeout(1)
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE
JOIN_AFTER_KILL_S = 5.0

_SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


@dataclass
class RunOptions:
    argv: list[str]
    request: CreateRequest
    timeout_s: float


@dataclass
class _Outcome:
    result: ExecResult | None = None
    error: BaseException | None = None
    session_id: str | None = None
    broken_pipe: bool = False
    done: threading.Event = field(default_factory=threading.Event)


class _Output:
    """The command's bytes to stdout: raw for a terminal, cleaned for a pipe."""

    def __init__(self, on_broken_pipe: threading.Event) -> None:
        self._out = sys.stdout.buffer
        self.tty = sys.stdout.isatty()
        self._broken = on_broken_pipe
        self._closed = False
        self._filter: TerminalFilter | PipeCleaner
        if self.tty:
            self._filter = TerminalFilter(self._raw, sanitize=True)
        else:
            self._filter = PipeCleaner(self._text)

    def _raw(self, data: bytes) -> None:
        if self._broken.is_set():
            return
        try:
            self._out.write(data)
            self._out.flush()
        except (BrokenPipeError, ValueError):
            self._broken.set()

    def _text(self, text: str) -> None:
        self._raw(text.encode("utf-8", "replace"))

    def feed(self, data: bytes) -> None:
        if not self._closed:
            self._filter.feed(data)

    def finish(self) -> None:
        """Write what is held back; later output (a worker still stopping) is dropped."""
        if not self._closed:
            self._closed = True
            self._filter.finish()


def command_line(argv: list[str]) -> str:
    """The shell line for ``argv``: run as is (no shell expansion), stdin from /dev/null."""
    return f"{shlex.join(argv)} </dev/null"


def run_command(manager: SessionManager, options: RunOptions) -> int:
    """Run ``options.argv`` in a new session of ``manager``; return the exit code to use."""
    run = _Run(manager, options)
    previous = {
        sig: signal.signal(sig, run.on_signal)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    previous[signal.SIGWINCH] = signal.signal(signal.SIGWINCH, run.on_winch)
    worker = threading.Thread(target=run.work, name="sandbox-run", daemon=True)
    try:
        worker.start()
        run.watch()
    finally:
        run.output.finish()
        remove_own_containers(manager)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return run.exit_code()


class _Run:
    """One run: the worker thread creates and executes, the main thread watches signals."""

    def __init__(self, manager: SessionManager, options: RunOptions) -> None:
        self.manager = manager
        self.options = options
        self.cancel = threading.Event()
        self.broken = threading.Event()
        self.outcome = _Outcome()
        self.output = _Output(self.broken)
        self.signals: list[int] = []
        self.winch = threading.Event()
        self.killed = False
        self.request = options.request
        if self.output.tty:
            rows, cols = terminal_size(sys.stdout.fileno())
            self.request = self.request.model_copy(update={"rows": rows, "cols": cols})

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals.append(signum)
        self.cancel.set()

    def on_winch(self, signum: int, frame: FrameType | None) -> None:
        self.winch.set()

    def work(self) -> None:
        outcome = self.outcome
        try:
            created = self.manager.create(self.request)
            outcome.session_id = created.session_id
            for notice in created.notices:  # e.g. a project the shell cannot write: say it first
                _note(f"note: {notice}")
            if self.cancel.is_set():
                return
            outcome.result = self.manager.execute(
                command_line(self.options.argv),
                session_id=created.session_id,
                timeout_s=self.options.timeout_s,
                max_lines=0,
                cancel=self.cancel,
                on_output=self.output.feed,
            )
        except BaseException as exc:
            outcome.error = exc
        finally:
            outcome.done.set()

    def watch(self) -> None:
        """Until the worker is done: stop on a broken pipe, follow resizes, and remove the
        container at once on a second signal."""
        outcome = self.outcome
        while not outcome.done.wait(0.1):
            if self.broken.is_set():
                self.cancel.set()
            if self.winch.is_set() and outcome.session_id is not None:
                self.winch.clear()
                _follow_resize(self.manager, outcome.session_id)
            if len(self.signals) >= 2 and not self.killed:
                self.killed = True
                log.info("second signal: removing the container now")
                remove_own_containers(self.manager)
                outcome.done.wait(JOIN_AFTER_KILL_S)
                break

    def exit_code(self) -> int:
        if self.broken.is_set():
            silence_stdout()
            return EXIT_BROKEN_PIPE
        result = self.outcome.result
        signals = self.signals
        if signals and (self.killed or result is None or result.interrupted):
            return _SIGNAL_EXIT.get(signal.Signals(signals[0]), 130)
        if self.outcome.error is not None:
            raise self.outcome.error
        if result is None:
            return 1
        return _exit_code(result, self.options.timeout_s, self.request)


def _exit_code(result: ExecResult, timeout_s: float, request: CreateRequest) -> int:
    if result.timed_out:
        _note(
            f"the command timed out after {timeout_s:g} s and was stopped "
            f"({', '.join(result.signals_sent) or 'killed'}); hint: raise --timeout"
        )
        return EXIT_TIMEOUT
    if result.oom_killed:
        _note(
            "the command was killed for lack of memory; hint: raise --memory "
            f"(it was {request.memory_mb or 'the default'} MB)"
        )
    if result.session_reset:
        _note("the container was reset to stop a runaway command")
    if result.exit_code is None:
        _note("the command's exit code is unknown (its shell ended unexpectedly)")
        return 1
    return result.exit_code


def _note(text: str) -> None:
    print(f"sandbox: {text}", file=sys.stderr, flush=True)


def _follow_resize(manager: SessionManager, session_id: str) -> None:
    rows, cols = terminal_size(sys.stdout.fileno())
    with contextlib.suppress(SandboxError):
        manager.get(session_id).resize(rows, cols)


def remove_own_containers(manager: SessionManager) -> None:
    """Close the manager, then remove any container labelled with its instance id."""
    with contextlib.suppress(SandboxError):
        manager.close()
    try:
        leftovers = manager.backend.list_containers(
            {LABEL_MANAGED: "true", LABEL_SERVER: manager.instance_id}
        )
        for state in leftovers:
            manager.backend.remove(state.id)
    except SandboxError as exc:
        log.warning("could not check for leftover containers: %s", exc)
