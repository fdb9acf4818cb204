"""One session: a container, one attached TTY shell in it, and the terminal it draws.

This module owns the shell's lifecycle, the reader thread and ``execute``; what a session shows
and takes (``send``, ``read``, ``read_log``, ``resize``) is in ``sandbox.views``, how it is
looked into and stopped (``signal``, ``info``, the escalation target) in ``sandbox.control``,
and the state they share in ``sandbox.state``.

Threads: one reader thread per session reads the exec socket and does only cheap work per chunk
(append to the raw log, find markers with ``bytes.find``, count newlines, notice terminal
queries); callers' threads do the rest (transcript cleaning, pyte) on demand. ``_cond`` guards
the shared state and wakes waiters; ``_exec_lock`` serializes ``execute`` calls; ``_screen_lock``
guards the lazy pyte screen.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sandbox.backends.base import Backend, ExecChannel
from sandbox.control import GRACE_S, ControlMixin
from sandbox.errors import (
    InvalidArgumentError,
    SandboxError,
    SessionBusyError,
    SessionExitedError,
)
from sandbox.execute import SHELL_ARGV, SHELL_RC, MarkerScanner, command_line, new_nonce
from sandbox.models import Destroyed, ExecResult, LogRange
from sandbox.output import OutputFn, OutputStreamer, shape_output
from sandbox.rawlog import RawLog
from sandbox.signals import escalate
from sandbox.state import Pending, SessionSpec, now_iso
from sandbox.terminal import DA1_REPLY, DA2_REPLY, LazyScreen, StreamScanner, clean_transcript
from sandbox.views import ViewsMixin

__all__ = ["OutputFn", "ProgressFn", "Session", "SessionSpec", "now_iso"]

log = logging.getLogger(__name__)

ProgressFn = Callable[[float, str], None]

READY_TIMEOUT_S = 30.0  # generous: a loaded engine can take seconds to start an exec
PROMPT_WAIT_S = 0.5
PROGRESS_EVERY_S = 1.0
RESET_NOTICE = b"\r\n[sandbox: the container was reset to stop a runaway job]\r\n"


class Session(ViewsMixin, ControlMixin):
    """A live session. Create through ``SessionManager``; every method is thread-safe."""

    def __init__(
        self,
        spec: SessionSpec,
        *,
        backend: Backend,
        container_id: str,
        log_path: Path,
        log_max_bytes: int,
        execute_max_bytes: int,
    ) -> None:
        self.spec = spec
        self.id = spec.session_id
        self.backend = backend
        self.container_id = container_id
        self.rows, self.cols = spec.rows, spec.cols
        self.log = RawLog(log_path, max_bytes=log_max_bytes)
        self._execute_max_bytes = execute_max_bytes
        self._cond = threading.Condition()
        self._exec_lock = threading.Lock()
        self._screen_lock = threading.Lock()
        self._markers = MarkerScanner()
        self._scanner = StreamScanner()
        # (start, end, replacement): where the screen shows the command instead of our line
        self._echoes: collections.deque[tuple[int, int, bytes]] = collections.deque(maxlen=256)
        self._screen = LazyScreen(self.rows, self.cols)
        self._channel: ExecChannel | None = None
        self._generation = 0
        self._alive = False
        self._shell_pid: int | None = None
        self._exit_code: int | None = None
        self._pending: Pending | None = None
        self._last_exit_code: int | None = None
        self._read_offset = self.log.size
        self._skip_prompt_at: int | None = None
        self._prompt_seen = True
        self._prompt_marker_works = True
        self._last_output = time.monotonic()
        self.last_activity_at = spec.created_at
        self.resets = 0
        self._oom_baseline = 0
        self._oom_seen = False
        self._cpu_sample: tuple[float, float] | None = None
        self._started_mono = time.monotonic()
        self._destroyed = False

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def is_shell(self) -> bool:
        return self.spec.command is None

    def open_shell(self) -> None:
        """Attach a TTY exec (the shell, or the session's command) and wait until it answers."""
        argv = list(SHELL_ARGV) if self.is_shell else list(self.spec.command or [])
        env = dict(self.spec.env)
        if self.is_shell:
            env["SANDBOX_RC"] = SHELL_RC
        channel = self.backend.exec_attach(
            self.container_id,
            argv,
            user=self.spec.user,
            env=env,
            workdir=self.spec.workdir,
            rows=self.rows,
            cols=self.cols,
        )
        with self._cond:
            self._generation += 1
            generation = self._generation
            self._channel = channel
            self._alive = True
            self._exit_code = None
            self._shell_pid = None
            self._pending = None
            self._prompt_seen = False
            self._markers = MarkerScanner()
        thread = threading.Thread(
            target=self._reader, args=(channel, generation), name=f"sandbox-reader-{self.id}"
        )
        thread.daemon = True
        thread.start()
        if not self.is_shell:
            return
        deadline = time.monotonic() + READY_TIMEOUT_S
        with self._cond:
            while self._shell_pid is None and self._alive:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            if self._shell_pid is None:
                tail = clean_transcript(self.log.read(self.log.size - 2000, self.log.size))
                raise SessionExitedError(
                    "the session's shell did not start"
                    + (f"; it printed: {tail.strip()[-500:]}" if tail.strip() else ""),
                    hint="Is bash installed in the image? The session image has it.",
                )

    def _reader(self, channel: ExecChannel, generation: int) -> None:
        while True:
            data = channel.read(65536)
            if not data:
                break
            queries = self._on_output(data)
            if queries:
                self._answer(queries, channel)
        code = channel.exit_code()
        deadline = time.monotonic() + 2.0
        while code is None and time.monotonic() < deadline:  # the exit may lag the stream's end
            time.sleep(0.02)
            code = channel.exit_code()
        with self._cond:
            if generation == self._generation:
                self._alive = False
                self._exit_code = code
            self._cond.notify_all()
        log.debug("session %s: shell (generation %d) ended with %s", self.id, generation, code)

    def _on_output(self, data: bytes) -> list[str]:
        with self._cond:
            offset = self.log.append(data)
            self._last_output = time.monotonic()
            scan = self._scanner.scan(data, offset)
            markers = self._markers.scan(data, offset)
            p = self._pending
            counted_from = offset
            for m in markers:
                if m.kind == "start" and p is not None and m.nonce == p.nonce:
                    p.start = m.end
                    counted_from = m.end
                    self._echoes.append((p.sent_offset, m.start, p.display))
                elif m.kind == "end" and p is not None and m.nonce == p.nonce and p.end is None:
                    if p.start is None:  # interrupted before it started: empty output
                        p.start = m.start
                    p.newlines += data.count(b"\n", max(0, counted_from - offset), m.start - offset)
                    p.end, p.after, p.exit_code = m.start, m.end, m.status
                    self._last_exit_code = m.status
                    self._prompt_seen = False
                elif m.kind == "prompt":
                    self._prompt_seen = True
                    self._prompt_marker_works = True
                    if p is not None and p.finished and p.prompt_end is None:
                        p.prompt_end = m.end
                    if self._skip_prompt_at is not None:
                        if self._read_offset == self._skip_prompt_at:
                            self._read_offset = m.end
                        self._skip_prompt_at = None
                elif m.kind == "ready":
                    with contextlib.suppress(ValueError):
                        self._shell_pid = int(m.nonce)
                    self._prompt_seen = False
            if p is not None and p.start is not None and p.end is None:
                p.newlines += data.count(b"\n", max(0, p.start - offset, counted_from - offset))
            self._cond.notify_all()
        return scan.queries

    def _answer(self, queries: list[str], channel: ExecChannel) -> None:
        """Answer terminal queries a program waits on (cursor position, device attributes)."""
        replies = []
        for q in queries:
            if q == "cpr":
                with self._screen_lock:
                    self._screen.catch_up(self.log.size, self._display_read, self._scanner)
                    replies.append(self._screen.cursor_report())
            elif q == "da1":
                replies.append(DA1_REPLY)
            elif q == "da2":
                replies.append(DA2_REPLY)
        with contextlib.suppress(SandboxError):
            channel.write(b"".join(replies))

    def execute(
        self,
        command: str,
        *,
        timeout_s: float,
        idle_timeout_s: float | None = None,
        background: bool = False,
        max_lines: int = 200,
        strip_ansi: bool = True,
        progress: ProgressFn | None = None,
        cancel: threading.Event | None = None,
        on_output: OutputFn | None = None,
    ) -> ExecResult:
        """Run ``command`` in the shell and return exactly what it printed and its exit code.

        ``on_output`` receives the command's raw bytes as they arrive (for live streaming);
        ``progress`` gets (elapsed seconds, latest output line) about once a second; setting
        ``cancel`` stops the command with the escalation ladder.
        """
        if not self.is_shell:
            raise InvalidArgumentError(
                f"session {self.id} runs {self.spec.command!r}, not a shell",
                hint="Use send to type into it and read to see its output.",
            )
        if not command.strip():
            raise InvalidArgumentError("command is empty", hint="Pass the shell command to run.")
        if "\x00" in command:
            raise InvalidArgumentError("command contains a NUL byte", hint="Remove it.")
        self._touch()
        t0 = time.monotonic()
        if not self._acquire_turn(t0 + timeout_s, cancel):
            if cancel is not None and cancel.is_set():
                return self._not_started(t0)
            raise SessionBusyError(
                f"session {self.id} is still running another execute after {timeout_s:g} s"
            )
        try:
            return self._execute_locked(
                command,
                t0,
                timeout_s,
                idle_timeout_s,
                background,
                max_lines,
                strip_ansi,
                progress,
                cancel,
                on_output,
            )
        finally:
            self._exec_lock.release()

    def _acquire_turn(self, deadline: float, cancel: threading.Event | None) -> bool:
        """Wait for this session's execute lock, in slices so a cancel is noticed."""
        while True:
            remaining = deadline - time.monotonic()
            if cancel is not None and cancel.is_set():
                return False
            if self._exec_lock.acquire(timeout=max(0.0, min(remaining, 0.1))):
                return True
            if remaining <= 0:
                return False

    def _not_started(self, t0: float) -> ExecResult:
        """The result of an execute cancelled before its command was typed."""
        end = self.log.size
        return ExecResult(
            session_id=self.id,
            output="",
            exit_code=None,
            interrupted=True,
            log_range=LogRange(from_byte=end, to_byte=end),
            duration_ms=int((time.monotonic() - t0) * 1000),
        )

    def _execute_locked(
        self,
        command: str,
        t0: float,
        timeout_s: float,
        idle_timeout_s: float | None,
        background: bool,
        max_lines: int,
        strip_ansi: bool,
        progress: ProgressFn | None,
        cancel: threading.Event | None,
        on_output: OutputFn | None,
    ) -> ExecResult:
        channel = self._require_alive()
        deadline = time.monotonic() + timeout_s
        with self._cond:
            # A command left running by a background/idle execute keeps the shell busy.
            while self._pending is not None and not self._pending.finished and self._alive:
                remaining = deadline - time.monotonic()
                if cancel is not None and cancel.is_set():
                    return self._not_started(t0)
                if remaining <= 0:
                    raise SessionBusyError(
                        f"session {self.id} is still running an earlier command",
                        hint="read it, send it input, or stop it with signal (or use another "
                        "session).",
                    )
                self._cond.wait(min(remaining, 0.1))
            channel = self._require_alive()
            # Type only once readline is up (its prompt marker), so the kernel never echoes.
            prompt_deadline = time.monotonic() + PROMPT_WAIT_S
            while not self._prompt_seen and self._prompt_marker_works and self._alive:
                remaining = prompt_deadline - time.monotonic()
                if remaining <= 0:
                    self._prompt_marker_works = False
                    break
                self._cond.wait(remaining)
            p = Pending(
                nonce=new_nonce(),
                sent_at=time.monotonic(),
                sent_offset=self.log.size,
                display=command.replace("\n", "\r\n").encode("utf-8", "replace") + b"\r\n",
            )
            self._pending = p
            self._skip_prompt_at = None
            self._prompt_seen = False
        deadline = time.monotonic() + timeout_s
        channel.write(command_line(command, p.nonce))
        if background and idle_timeout_s is None:
            idle_timeout_s = 1.0
        stream = OutputStreamer(self.log, p, on_output) if on_output is not None else None
        outcome = self._wait(p, deadline, idle_timeout_s, background, progress, cancel, stream)
        signals_sent: list[str] = []
        reset = False
        if outcome in ("timeout", "cancelled"):
            esc = escalate(self, grace_s=GRACE_S)
            signals_sent, reset = esc.signals_sent, esc.reset
        if stream is not None:
            stream.flush(final=True)
        with self._cond:
            finished = p.finished
            shell_died = not self._alive and not finished
            start = p.start if p.start is not None else self.log.size
            end = p.end if p.end is not None else self.log.size
            if finished:
                assert p.after is not None
                # "new" reads start after this command's prompt (or skip it once it comes)
                if p.prompt_end is not None:
                    self._read_offset = p.prompt_end
                else:
                    self._read_offset = p.after
                    self._skip_prompt_at = p.after
            else:
                self._read_offset = self.log.size
            exit_code = p.exit_code if finished else (self._exit_code if shell_died else None)
            newlines = p.newlines
        if reset:
            exit_code = 137
        output, truncated, total = shape_output(
            self.log, start, end, newlines, max_lines, strip_ansi, self._execute_max_bytes
        )
        oom = False
        if exit_code == 137 and not reset:
            oom = self._check_oom()
        result = ExecResult(
            session_id=self.id,
            output=output,
            exit_code=exit_code,
            timed_out=outcome == "timeout",
            interrupted=outcome == "cancelled",
            signals_sent=signals_sent,
            still_running=not finished and not shell_died and not reset,
            truncated=truncated,
            total_lines=total,
            log_range=LogRange(from_byte=start, to_byte=end),
            duration_ms=int((time.monotonic() - t0) * 1000),
            oom_killed=oom,
            idle=outcome == "idle",
            session_reset=reset,
            shell_exited=shell_died,
        )
        self._touch()
        return result

    def _wait(
        self,
        p: Pending,
        deadline: float,
        idle_timeout_s: float | None,
        background: bool,
        progress: ProgressFn | None,
        cancel: threading.Event | None,
        stream: OutputStreamer | None = None,
    ) -> str:
        next_progress = time.monotonic() + PROGRESS_EVERY_S
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    if p.finished:
                        return "done"
                    if not self._alive:
                        return "exited"
                    if cancel is not None and cancel.is_set():
                        return "cancelled"
                    if now >= deadline:
                        return "background" if background else "timeout"
                    wake = min(deadline, next_progress)
                    if idle_timeout_s is not None:
                        quiet_since = max(self._last_output, p.sent_at)
                        if background and p.start is not None and self.log.size <= p.start:
                            quiet_since = now  # background: wait for some output first
                        if now - quiet_since >= idle_timeout_s:
                            return "idle"
                        wake = min(wake, quiet_since + idle_timeout_s)
                    if cancel is not None:
                        wake = min(wake, now + 0.1)
                    if progress is not None and now >= next_progress:
                        break
                    if stream is not None and stream.pending():
                        break
                    self._cond.wait(max(0.0, wake - now))
            if stream is not None:
                stream.flush()
            if progress is not None and time.monotonic() >= next_progress:
                next_progress = time.monotonic() + PROGRESS_EVERY_S
                with contextlib.suppress(Exception):
                    progress(time.monotonic() - p.sent_at, self._last_line(p))

    def _last_line(self, p: Pending) -> str:
        if p.start is None:
            return ""
        end = self.log.size
        text = clean_transcript(self.log.read(max(p.start, end - 4096), end))
        lines = [ln for ln in text.splitlines() if ln.strip()]
        return lines[-1][:200] if lines else ""

    def reset(self) -> None:
        """Kill the container, start it again and open a new shell (a fork bomb's last resort)."""
        log.warning("session %s: resetting its container", self.id)
        old = self._channel
        with self._cond:
            self._generation += 1
            p = self._pending
            if p is not None and p.end is None:
                p.end = p.after = self.log.size
                p.exit_code = 137
                if p.start is None:
                    p.start = p.end
        if old is not None:
            old.close()
        self.backend.restart(self.container_id)
        self.resets += 1
        self.log.append(RESET_NOTICE)
        self.open_shell()

    def close(self) -> Destroyed:
        """Stop the shell and release local resources (the manager removes the container)."""
        self._destroyed = True
        channel = self._channel
        if channel is not None:
            channel.close()
        with self._cond:
            self._alive = False
            self._cond.notify_all()
        code = self._exit_code
        self.log.close()
        return Destroyed(destroyed=True, exit_code=code)
