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

from sandbox import durable
from sandbox.backends.base import Backend, ExecChannel
from sandbox.control import GRACE_S, ControlMixin
from sandbox.errors import (
    InvalidArgumentError,
    SandboxError,
    SessionBusyError,
    SessionExitedError,
)
from sandbox.execute import (
    SHELL_ARGV,
    Marker,
    MarkerScanner,
    command_line,
    new_nonce,
    shell_rc,
)
from sandbox.models import Destroyed, ExecResult, LogRange
from sandbox.output import OutputFn, OutputStreamer, shape_output
from sandbox.rawlog import RawLog
from sandbox.read_budget import ReadBudget
from sandbox.recording import CastRecorder
from sandbox.signals import escalate
from sandbox.state import Pending, SessionSpec, now_iso
from sandbox.terminal import DA1_REPLY, DA2_REPLY, LazyScreen, StreamScanner, clean_transcript
from sandbox.views import ViewsMixin

__all__ = ["OutputFn", "ProgressFn", "Session", "SessionSpec", "now_iso"]

log = logging.getLogger(__name__)

ProgressFn = Callable[[float, str], None]

READY_TIMEOUT_S = 30.0  # generous: a loaded engine can take seconds to start an exec
PROMPT_WAIT_S = 0.5
READ_SIZE = 256 * 1024
UNATTENDED_PAUSE_S = 0.005
UNATTENDED_BURST = 1024 * 1024  # drained at full speed before the unattended rate applies
PROGRESS_EVERY_S = 1.0
RESET_NOTICE = b"\r\n[sandbox: the container was reset to stop a runaway job]\r\n"
RESPAWN_NOTICE = (
    b"\r\n[sandbox: the shell stopped answering and was replaced by a fresh one; "
    b"its directory, variables and functions are back to their defaults]\r\n"
)
# A prompt marker arrived but not the command's end marker: the shell is idle at its prompt and
# its protocol is broken (stdout redirected, functions unset). Check after this much quiet.
LOST_QUIET_S = 0.3


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
        unattended_rate: int = 0,
        record: bool = False,
    ) -> None:
        self.spec = spec
        self.id = spec.session_id
        self.backend = backend
        self.container_id = container_id
        self.rows, self.cols = spec.rows, spec.cols
        self.log = RawLog(log_path, max_bytes=log_max_bytes)
        self.recording: CastRecorder | None = None
        if record:
            self.recording = CastRecorder(
                log_path.with_name("session.cast"),
                rows=self.rows,
                cols=self.cols,
                max_bytes=log_max_bytes,
            )
        self._activity_mono = time.monotonic()
        self._execute_max_bytes = execute_max_bytes
        self._unattended_rate = unattended_rate  # bytes/s drained while nobody waits (0: all)
        self._cond = threading.Condition()
        self._exec_lock = threading.Lock()
        self._attention = threading.Event()
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
        self._exit_marker: int | None = None
        self._watchers = 0  # readers blocked in read()/wait_output()
        self._pending: Pending | None = None
        self._last_exit_code: int | None = None
        self._read_offset = self.log.size
        self._skip_prompt_at: int | None = None
        self._prompt_seen = True
        self._prompt_marker_works = True
        self._last_output = time.monotonic()
        self.last_activity_at = spec.created_at
        self.resets = 0
        self.shell_restarts = 0
        # (nonce, ns_last_pid when it started) of the last command whose start marker came
        self._start_pid: tuple[str, int | None] | None = None
        # when (and at which offset) a prompt marker came while the pending command had no end
        # marker yet
        self._lost_since: float | None = None
        self._lost_prompt: int | None = None
        # in the shell's ready and exit markers; None: accept any (an adopted shell)
        self._shell_token: str | None = None
        self._oom_baseline = 0
        self._oom_seen = False
        self._cpu_sample: tuple[float, float] | None = None
        self._started_mono = time.monotonic()
        self._destroyed = False

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def is_shell(self) -> bool:
        return self.spec.command is None

    def open_shell(self, *, adopt: bool = False) -> None:
        """Attach a TTY exec (the shell, or the session's command) and wait until it answers.

        Durable sessions start (or, with ``adopt``, find again) their tmux in the container."""
        argv = list(SHELL_ARGV) if self.is_shell else list(self.spec.command or [])
        env = dict(self.spec.env)
        token: str | None = None
        if self.is_shell:
            token = new_nonce()
            env["SANDBOX_RC"] = shell_rc(token)
        channel: ExecChannel
        adopted_pid: int | None = None
        if self.spec.durable:
            if adopt:
                adopted_pid = durable.pane_pid(self.backend, self.container_id, self.spec.user)
                if adopted_pid is None:
                    raise SessionExitedError(f"the tmux of durable session {self.id} is gone")
            else:
                self._start_tmux(argv, env)
            channel = durable.open_channel(
                self.backend,
                self.container_id,
                user=self.spec.user,
                env=env,
                rows=self.rows,
                cols=self.cols,
                from_offset=self.log.size,
            )
        else:
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
            # an adopted shell was started by an earlier server: its token is unknown
            self._shell_token = None if adopt else token
            if adopted_pid is not None:
                self._shell_pid = adopted_pid
                self._prompt_seen = True
                self._pending = self._unfinished_command()
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

    def _start_tmux(self, argv: list[str], env: dict[str, str]) -> None:
        user = self.spec.user
        # A new named volume is root's: open it to the shell's user (root needs no capability
        # to chmod what it owns).
        self.backend.run(self.container_id, ["chmod", "0777", durable.STATE_DIR], user="0:0")
        started = self.backend.run(
            self.container_id,
            durable.start_argv(
                argv,
                rows=self.rows,
                cols=self.cols,
                workdir=self.spec.workdir,
                log_cap=self.log.max_bytes,
            ),
            user=user,
            env=env,
        )
        if started.exit_code != 0:
            raise SessionExitedError(
                "tmux did not start in the durable session: "
                + started.output.decode("utf-8", "replace").strip()[-300:],
                hint="The session image has tmux; a custom image needs tmux >= 3 for durable=true.",
            )

    def _unfinished_command(self) -> Pending | None:
        """After a restart: the command whose start marker the log has but not its end."""
        end = self.log.size
        tail = self.log.read(max(0, end - 1024 * 1024), end)
        base = end - len(tail)
        last_start = None
        for m in MarkerScanner().scan(tail, base):
            if m.kind == "start":
                last_start = m
            elif m.kind == "end" and last_start is not None and m.nonce == last_start.nonce:
                last_start = None
        if last_start is None:
            return None
        p = Pending(nonce=last_start.nonce, sent_at=time.monotonic(), start=last_start.end)
        p.newlines = self.log.read(p.start or end, end).count(b"\n")
        return p

    def _reader(self, channel: ExecChannel, generation: int) -> None:
        budget = ReadBudget(self._unattended_rate, UNATTENDED_BURST)
        while True:
            data = channel.read(READ_SIZE)
            if not data:
                break
            queries = self._on_output(data)
            if queries and not self.spec.durable:  # under tmux, tmux answers them
                self._answer(queries, channel)
            if self._attended():
                budget.refill()
                continue
            # Nobody waits on this session: let output gather into fewer, bigger reads (a
            # flood then costs far fewer wakeups and less of the GIL that other sessions'
            # round trips need), and past a burst drain it at the budget's rate. An execute,
            # a read or typed input ends the pause at once (``_attend``).
            pause = budget.spend(len(data))
            if len(data) < READ_SIZE:
                pause = max(pause, UNATTENDED_PAUSE_S)
            if pause > 0:
                self._attention.clear()
                if not self._attended():
                    self._attention.wait(pause)
        code = channel.exit_code()
        deadline = time.monotonic() + 2.0
        while code is None and self._exit_marker is None and time.monotonic() < deadline:
            time.sleep(0.02)  # the exec's exit code may lag the end of its stream
            code = channel.exit_code()
        with self._cond:
            if generation == self._generation:
                self._alive = False
                self._exit_code = code if code is not None else self._exit_marker
            self._cond.notify_all()
        log.debug("session %s: shell (generation %d) ended with %s", self.id, generation, code)

    def _on_output(self, data: bytes) -> list[str]:
        if self.recording is not None:
            self.recording.output(data)
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
                    self._start_pid = (m.nonce, m.last_pid)
                    counted_from = m.end
                    self._echoes.append((p.sent_offset, m.start, p.display))
                elif m.kind == "end" and p is not None and m.nonce == p.nonce and p.end is None:
                    if p.start is None:  # interrupted before it started: empty output
                        p.start = m.start
                    p.newlines += data.count(b"\n", max(0, counted_from - offset), m.start - offset)
                    p.end, p.after, p.exit_code = m.start, m.end, m.status
                    self._last_exit_code = m.status
                    self._prompt_seen = False
                    self._exit_marker = None  # the shell lives on: an exit marker was forged
                elif m.kind == "prompt":
                    self._exit_marker = None  # the shell lives on: an exit marker was forged
                    if p is not None and p.end is None and m.start >= p.sent_offset:
                        self._lost_since = time.monotonic()
                        if self._lost_prompt is None:
                            self._lost_prompt = m.start
                    self._prompt_seen = True
                    self._prompt_marker_works = True
                    if p is not None and p.finished and p.prompt_end is None:
                        p.prompt_end = m.end
                    if self._skip_prompt_at is not None:
                        if self._read_offset == self._skip_prompt_at:
                            self._read_offset = m.end
                        self._skip_prompt_at = None
                elif m.kind == "ready" and self._shell_pid is None and self._genuine(m):
                    # only the shell's first: a later one was printed by a program (a file)
                    with contextlib.suppress(ValueError):
                        self._shell_pid = int(m.nonce)
                    self._prompt_seen = False
                    self._exit_marker = None
                elif m.kind == "exit" and self._genuine(m):
                    self._exit_marker = m.status
            if p is not None and p.start is not None and p.end is None:
                p.newlines += data.count(b"\n", max(0, p.start - offset, counted_from - offset))
            self._cond.notify_all()
        return scan.queries

    def _genuine(self, marker: Marker) -> bool:
        """A ready or exit marker the shell printed, not a program (or a file it printed)."""
        return self._shell_token is None or marker.token == self._shell_token

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
                self._attend()
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
        resets_before = self.resets
        revived = self._revive_if_lost()
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
            self._lost_since = self._lost_prompt = None
        deadline = time.monotonic() + timeout_s
        channel.write(command_line(command, p.nonce))
        if background and idle_timeout_s is None:
            idle_timeout_s = 1.0
        stream = OutputStreamer(self.log, p, on_output) if on_output is not None else None
        while True:
            outcome = self._wait(p, deadline, idle_timeout_s, background, progress, cancel, stream)
            if outcome != "lost" or self._confirm_lost(p):
                break
        signals_sent: list[str] = []
        reset = restarted = False
        killed = 0
        if outcome == "lost":
            restarted = self.respawn()
            if not restarted:  # a durable session: the ladder ends with a container reset
                outcome = "timeout"
        if outcome in ("timeout", "cancelled"):
            esc = escalate(self, grace_s=GRACE_S)
            signals_sent, reset, restarted = esc.signals_sent, esc.reset, esc.shell_restarted
            if not reset and not restarted and self._alive:
                killed = self.sweep(self._command_start_pid(p))
                if killed < 0:  # not even a control command runs: what is left fills the pids
                    log.warning("session %s: cannot look for stray processes: resetting", self.id)
                    try:
                        self.reset()
                        reset = True
                    except SandboxError as exc:
                        log.warning("session %s: reset failed: %s", self.id, exc.message)
                    killed = 0
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
        if shell_died and self._revive_if_lost():
            restarted, shell_died = True, False
        reset = reset or self.resets > resets_before
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
            still_running=not finished and not shell_died and not reset and not restarted,
            truncated=truncated,
            total_lines=total,
            log_range=LogRange(from_byte=start, to_byte=end),
            duration_ms=int((time.monotonic() - t0) * 1000),
            oom_killed=oom,
            idle=outcome == "idle",
            session_reset=reset,
            shell_exited=shell_died,
            shell_restarted=restarted or revived,
            stray_processes_killed=killed,
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
                    wake = deadline if progress is None else min(deadline, next_progress)
                    if self._lost_since is not None:
                        quiet_from = max(self._lost_since, self._last_output)
                        if now - quiet_from >= LOST_QUIET_S:
                            return "lost"
                        wake = min(wake, quiet_from + LOST_QUIET_S)
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

    def _command_start_pid(self, p: Pending) -> int | None:
        """The pid namespace's last pid just before command ``p`` started (None: unknown)."""
        known = self._start_pid
        return known[1] if known is not None and known[0] == p.nonce else None

    def _confirm_lost(self, p: Pending) -> bool:
        """A prompt came without ``p``'s end marker: True when the shell really idles at its
        prompt with its markers lost (then it must be replaced), False on a false alarm (a
        program printed a marker-like sequence, or the marker was only late)."""
        with self._cond:
            self._lost_since = None
            if p.finished or not self._alive:
                return False
        try:
            if self.foreground_pgid() is not None:
                return False  # a program runs in front: the prompt marker was not the shell's
        except SandboxError:
            return False  # cannot look: let the timeout decide
        if p.start is None:
            return True  # not even the start marker came: the protocol functions are gone
        self.resync()
        return not self.wait_done(GRACE_S)

    def respawn(self) -> bool:
        """Kill a shell that no longer answers and open a fresh one in the same container.

        The container, the project and other processes stay; the shell's state (directory,
        variables, functions) is back to the defaults. Not for durable sessions (their shell
        lives in tmux) or sessions that run a command instead of a shell."""
        if self.spec.durable or self._destroyed or not self.is_shell:
            return False
        old_pid, old = self._shell_pid, self._channel
        log.warning("session %s: the shell stopped answering, starting a fresh one", self.id)
        with self._cond:
            self._generation += 1
            self._alive = False
            p = self._pending
            if p is not None and p.end is None:
                self._close_lost(p)
            self._cond.notify_all()
        if old_pid is not None:
            with contextlib.suppress(SandboxError):
                self.backend.run(
                    self.container_id, ["kill", "-9", str(old_pid)], user=self.spec.user
                )
        if old is not None:
            old.close()
        return self._reopen()

    def _close_lost(self, p: Pending) -> None:
        """End command ``p`` whose markers never came: its output is what follows the echo of
        the typed line, up to the prompt the shell drew after it (exit code unknown)."""
        size = self.log.size
        if p.start is None:
            echoed = self.log.read(p.sent_offset, min(size, p.sent_offset + 65536)).find(b"\n")
            p.start = p.sent_offset + echoed + 1 if echoed >= 0 else size
        end = size
        if self._lost_prompt is not None and self._lost_prompt >= p.start:
            before = self.log.read(p.start, self._lost_prompt)
            title = before.rfind(b"\x1b]0;sandbox:")
            end = p.start + title if title >= 0 else self._lost_prompt
        p.end = p.after = end

    def _reopen(self) -> bool:
        self.log.append(RESPAWN_NOTICE)
        try:
            self.open_shell()
        except SandboxError as exc:
            log.warning("session %s: no new shell (%s)", self.id, exc.message)
            return False
        self.shell_restarts += 1
        return True

    def _revive_if_lost(self) -> bool:
        """A shell that died without exiting (killed: ``kill -9 $$``, ``kill -9 -1``) is
        replaced; one that ran ``exit`` (its exit marker came) stays exited, as does a durable
        session's or a destroyed one."""
        with self._cond:
            if (
                self._alive
                or self._destroyed
                or self.spec.durable
                or not self.is_shell
                or self._exit_marker is not None
                or self._channel is None
            ):
                return False
        try:
            state = self.backend.inspect(self.container_id)
        except SandboxError:
            return False
        if state.status != "running":
            return False  # killed or paused from outside: the session is over
        log.warning("session %s: the shell was killed, starting a fresh one", self.id)
        if self._reopen():
            return True
        try:  # the shell's stream can end before the engine reports a killed container
            if self.backend.inspect(self.container_id).status != "running":
                return False  # killed from outside after all: the session is over
        except SandboxError:
            return False
        # Not even a new shell lives (its memory is full of tmpfs pages, say): start afresh.
        try:
            self.reset()
        except SandboxError as exc:
            log.warning("session %s: reset failed: %s", self.id, exc.message)
            return False
        return True

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
        if not self.spec.durable:  # a durable log mirrors the container's file: add nothing
            self.log.append(RESET_NOTICE)
        self.open_shell()

    def _attended(self) -> bool:
        """Someone waits on this session's output: an execute, a read, a person's terminal."""
        return self._exec_lock.locked() or self._watchers > 0

    @property
    def idle_s(self) -> float:
        """Seconds since a client last used this session."""
        return time.monotonic() - self._activity_mono

    def detach(self) -> None:
        """Let go of a durable session's shell without ending it (server shutdown, idle TTL):
        tmux keeps it running; the log stays readable here."""
        channel = self._channel
        with self._cond:
            self._generation += 1  # the reader's end is not the shell's
            self._alive = False
            self._cond.notify_all()
        if channel is not None:
            channel.close()

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
        # a full disk must not stop a destroy half-way (the container would be left behind)
        if self.recording is not None:
            try:
                self.recording.close()
            except OSError as exc:
                log.warning("session %s: closing its recording failed: %s", self.id, exc)
        try:
            self.log.close()
        except OSError as exc:
            log.warning("session %s: closing its log failed: %s", self.id, exc)
        return Destroyed(destroyed=True, exit_code=code)
