"""One session: a container, one attached TTY shell in it, and the terminal it draws.

This module owns the shell's lifecycle and the reader thread. ``execute`` is in
``sandbox.session.commands``, how a lost or killed shell is replaced in
``sandbox.session.recovery``; what a session shows and takes (``send``, ``read``, ``read_log``,
``resize``) is in ``sandbox.session.views``, how it is looked into and stopped (``signal``,
``info``, the escalation target) in
``sandbox.session.control``, and the state they share in ``sandbox.session.state``.

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
from pathlib import Path

from sandbox.backends.base import Backend, ExecChannel
from sandbox.config import KEEPALIVE_UID
from sandbox.errors import (
    SandboxError,
    SessionExitedError,
)
from sandbox.models import Destroyed
from sandbox.session.commands import CommandsMixin, ProgressFn
from sandbox.session.input_watch import InputWatch
from sandbox.session.output import OutputFn
from sandbox.session.read_budget import ReadBudget
from sandbox.session.state import Pending, SessionSpec, now_iso
from sandbox.session.views import ViewsMixin
from sandbox.shell import durable
from sandbox.shell.input_wait import WATCH_SCRIPT
from sandbox.shell.markers import (
    SHELL_ARGV,
    Marker,
    MarkerScanner,
    command_argv,
    new_nonce,
    shell_rc,
)
from sandbox.terminal.rawlog import RawLog
from sandbox.terminal.recording import CastRecorder
from sandbox.terminal.stream import (
    DA1_REPLY,
    DA2_REPLY,
    LazyScreen,
    StreamScanner,
    clean_transcript,
)

__all__ = ["OutputFn", "ProgressFn", "Session", "SessionSpec", "now_iso"]

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 30.0  # generous: a loaded engine can take seconds to start an exec
READ_SIZE = 256 * 1024
UNATTENDED_PAUSE_S = 0.005
UNATTENDED_BURST = 1024 * 1024  # drained at full speed before the unattended rate applies


class Session(ViewsMixin, CommandsMixin):
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
        self._input_watch = InputWatch(self._open_input_watch, self.id)
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
        self._revivable = False
        self._idle_bytes = 0

    # -- lifecycle -----------------------------------------------------------------------
    def open_shell(self, *, adopt: bool = False) -> None:
        """Attach a TTY exec (the shell, or the session's command) and wait until it answers.

        Durable sessions start (or, with ``adopt``, find again) their tmux in the container."""
        argv = (
            list(SHELL_ARGV)
            if self.is_shell
            else command_argv(
                list(self.spec.command or []),
                prelude=not self.backend.sets_fsize_ulimit or "SANDBOX_NPROC" in self.spec.env,
            )
        )
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
            self._revivable = False
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

    def _open_input_watch(self) -> ExecChannel:
        return self.backend.exec_attach(
            self.container_id,
            ["bash", "-c", WATCH_SCRIPT],
            user=self.spec.user,
            env={},
            workdir=self.spec.workdir,
            rows=self.rows,
            cols=self.cols,
        )

    def _start_tmux(self, argv: list[str], env: dict[str, str]) -> None:
        user = self.spec.user
        # A new named volume is root's on Docker and the container user's (the keepalive's) on
        # Podman: its owner opens it to the shell's user (no capability needed for that).
        opened = self.backend.run(
            self.container_id, ["chmod", "0777", durable.STATE_DIR], user="0:0"
        )
        if opened.exit_code != 0:
            keepalive = f"{KEEPALIVE_UID}:{KEEPALIVE_UID}"
            self.backend.run(
                self.container_id, ["chmod", "0777", durable.STATE_DIR], user=keepalive
            )
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
                if not self._attended() and self._current(generation):
                    self._attention.wait(pause)
        code = channel.exit_code()
        deadline = time.monotonic() + 2.0
        while code is None and self._exit_marker is None and time.monotonic() < deadline:
            time.sleep(0.02)  # the exec's exit code may lag the end of its stream
            code = channel.exit_code()
        revivable = self._container_outlives_shell(generation)
        with self._cond:
            if generation == self._generation:
                self._alive = False
                self._exit_code = code if code is not None else self._exit_marker
                self._revivable = revivable
            self._cond.notify_all()
        log.debug("session %s: shell (generation %d) ended with %s", self.id, generation, code)

    def _container_outlives_shell(self, generation: int) -> bool:
        """Whether the next execute can start a fresh login shell: the shell ended by its own
        ``exit`` (its exit marker came; a killed container ends the stream without one) and
        the container still runs (one engine call, when a shell ends)."""
        if not self.is_shell or self.spec.durable or self._destroyed:
            return False
        if self._exit_marker is None:
            return False
        if not self._current(generation):
            return False
        try:
            return self.backend.inspect(self.container_id).status == "running"
        except SandboxError:
            return False

    def _on_output(self, data: bytes) -> list[str]:
        if self.recording is not None:
            self.recording.output(data)
        with self._cond:
            offset = self.log.append(data)
            self._last_output = time.monotonic()
            scan = self._scanner.scan(data, offset)
            markers = self._markers.scan(data, offset)
            p = self._pending
            if p is None or p.finished:
                self._idle_bytes += len(data)
            counted_from = offset
            for m in markers:
                if m.kind == "start" and p is not None and m.nonce == p.nonce:
                    p.start = m.end
                    p.pressure = m.pressure
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

    def _current(self, generation: int) -> bool:
        """Whether a reader of shell ``generation`` still serves a live session (a replaced,
        detached or destroyed one must not pause: its channel is closing)."""
        return generation == self._generation and not self._destroyed

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
        self._input_watch.close()
        channel = self._channel
        with self._cond:
            self._generation += 1  # the reader's end is not the shell's
            self._alive = False
            self._cond.notify_all()
        if channel is not None:
            channel.close()
        self._attend()  # a reader paused by the unattended budget sees the end now

    def close(self) -> Destroyed:
        """Stop the shell and release local resources (the manager removes the container)."""
        self._destroyed = True
        self._input_watch.close()
        channel = self._channel
        if channel is not None:
            channel.close()
        self._attend()
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
