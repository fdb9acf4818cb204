"""The live link to a session's shell: the TTY exec that runs it, the reader thread that drains
it into the raw log, and whether the shell lives.

Threads: one reader thread per shell reads the exec socket and does only cheap work per chunk
(append to the raw log, feed the marker tracker, note terminal modes and queries); callers'
threads do the rest (transcript cleaning, pyte) on demand. ``cond`` guards the link's state and
the tracker's and wakes waiters; ``turn`` is the execute lock (one command at a time).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from sandbox.backends.base import Backend, ExecChannel
from sandbox.errors import SandboxError, SessionExitedError
from sandbox.session.display import Display
from sandbox.session.read_pacing import ReadPacing
from sandbox.session.spec import SessionSpec, iso_at
from sandbox.session.waits import Waits
from sandbox.shell import durable
from sandbox.shell.markers import SHELL_ARGV, command_argv, new_nonce, shell_rc
from sandbox.shell.tracker import (
    CommandStarted,
    CommandTracker,
    Pending,
    PromptDrawn,
    unfinished_command,
)
from sandbox.terminal.rawlog import RawLog
from sandbox.terminal.recording import CastRecorder
from sandbox.terminal.stream import DA1_REPLY, DA2_REPLY, clean_transcript

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 30.0  # generous: a loaded engine can take seconds to start an exec


class ShellLink:
    """The shell's exec and its reader; every method is thread-safe."""

    def __init__(
        self,
        spec: SessionSpec,
        *,
        backend: Backend,
        container_id: str,
        log: RawLog,
        display: Display,
        recording: CastRecorder | None,
        unattended_rate: int = 0,
        waits: Waits | None = None,
    ) -> None:
        self.spec = spec
        self.id = spec.session_id
        self.backend = backend
        self.container_id = container_id
        self.log = log
        self.display = display
        self.recording = recording
        self.cond = threading.Condition()
        self.turn = threading.Lock()
        # when the reader reads and pauses, and whom it wakes (``unattended_rate``: bytes/s
        # drained while nobody attends, 0: all)
        self.pacing = ReadPacing(
            rate=unattended_rate,
            waits=waits if waits is not None else Waits(),
            turn=self.turn,
        )
        self.tracker = CommandTracker()
        self._channel: ExecChannel | None = None
        self._generation = 0  # of the shell: a reader of an older one changes nothing
        self.alive = False
        self.destroyed = False
        self.revivable = False  # the login shell ended but its container runs
        self.exit_code: int | None = None
        self.last_output = time.monotonic()
        # when a client last used the session: a touch only notes the time (an execute
        # touches twice), the timestamp is spelled out when someone reads it
        self._activity_iso = spec.created_at
        self._activity_wall: float | None = None  # time.time() of the last touch, if any
        self._activity_mono = time.monotonic()

    @property
    def is_shell(self) -> bool:
        return self.spec.command is None

    @property
    def attached(self) -> bool:
        """A shell was attached once (a session never opened has nothing to revive)."""
        return self._channel is not None

    # -- opening ---------------------------------------------------------------------------
    def open_shell(self, *, adopt: bool = False) -> None:
        """Attach a TTY exec (the shell, or the session's command) and wait until it answers.

        Durable sessions start (or, with ``adopt``, find again) their tmux in the container."""
        env = dict(self.spec.env)
        token: str | None = None
        if self.is_shell:
            token = new_nonce()
            env["SANDBOX_RC"] = shell_rc(token)
        adopted_pid: int | None = None
        if self.spec.durable and adopt:
            adopted_pid = durable.pane_pid(self.backend, self.container_id, self.spec.user)
            if adopted_pid is None:
                raise SessionExitedError(f"the tmux of durable session {self.id} is gone")
        channel = self._attach(env, start_tmux=not adopt)
        with self.cond:
            self._generation += 1
            generation = self._generation
            self._channel = channel
            self.alive = True
            self.revivable = False
            self.exit_code = None
            # an adopted shell was started by an earlier server: its token is unknown
            adopted = None
            if adopted_pid is not None:
                adopted = (adopted_pid, self._unfinished_command())
            self.tracker.new_shell(None if adopt else token, adopted=adopted)
        thread = threading.Thread(
            target=self._reader, args=(channel, generation), name=f"sandbox-reader-{self.id}"
        )
        thread.daemon = True
        thread.start()
        if self.is_shell:
            self._wait_ready()

    def _argv(self) -> list[str]:
        if self.is_shell:
            return list(SHELL_ARGV)
        return command_argv(
            list(self.spec.command or []),
            prelude=not self.backend.sets_fsize_ulimit or "SANDBOX_NPROC" in self.spec.env,
        )

    def _attach(self, env: dict[str, str], *, start_tmux: bool) -> ExecChannel:
        rows, cols = self.display.rows, self.display.cols
        if not self.spec.durable:
            return self.backend.exec_attach(
                self.container_id,
                self._argv(),
                user=self.spec.user,
                env=env,
                workdir=self.spec.workdir,
                rows=rows,
                cols=cols,
            )
        if start_tmux:
            durable.start(
                self.backend,
                self.container_id,
                self._argv(),
                user=self.spec.user,
                env=env,
                rows=rows,
                cols=cols,
                workdir=self.spec.workdir,
                log_cap=self.log.max_bytes,
            )
        return durable.open_channel(
            self.backend,
            self.container_id,
            user=self.spec.user,
            env=env,
            rows=rows,
            cols=cols,
            from_offset=self.log.size,
        )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        with self.cond:
            while self.tracker.shell_pid is None and self.alive:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.cond.wait(remaining)
            if self.tracker.shell_pid is None:
                tail = clean_transcript(self.log.read(self.log.size - 2000, self.log.size))
                raise SessionExitedError(
                    "the session's shell did not start"
                    + (f"; it printed: {tail.strip()[-500:]}" if tail.strip() else ""),
                    hint="Is bash installed in the image? The session image has it.",
                )

    def _unfinished_command(self) -> Pending | None:
        end = self.log.size
        tail = self.log.read(max(0, end - 1024 * 1024), end)
        return unfinished_command(tail, end - len(tail), sent_at=time.monotonic())

    # -- reading -------------------------------------------------------------------------
    def _reader(self, channel: ExecChannel, generation: int) -> None:
        reads = self.pacing.reads(lambda: self._current(generation))
        while True:
            data = channel.read(reads.size())
            if not data:
                break
            queries = self._on_output(data)
            if queries and not self.spec.durable:  # under tmux, tmux answers them
                self._answer(queries, channel)
            reads.done(len(data))
        self._ended(channel, generation)

    def _ended(self, channel: ExecChannel, generation: int) -> None:
        code = channel.exit_code()
        deadline = time.monotonic() + 2.0
        while code is None and self.tracker.exit_marker is None and time.monotonic() < deadline:
            time.sleep(0.02)  # the exec's exit code may lag the end of its stream
            code = channel.exit_code()
        revivable = self._container_outlives_shell(generation)
        with self.cond:
            if generation == self._generation:
                self.alive = False
                self.exit_code = code if code is not None else self.tracker.exit_marker
                self.revivable = revivable
            self.cond.notify_all()
        log.debug("session %s: shell (generation %d) ended with %s", self.id, generation, code)

    def _container_outlives_shell(self, generation: int) -> bool:
        """Whether the next execute can start a fresh login shell: the shell ended by its own
        ``exit`` (its exit marker came; a killed container ends the stream without one) and
        the container still runs (one engine call, when a shell ends)."""
        if not self.is_shell or self.spec.durable or self.destroyed:
            return False
        if self.tracker.exit_marker is None or not self._current(generation):
            return False
        try:
            return self.backend.inspect(self.container_id).status == "running"
        except SandboxError:
            return False

    def _on_output(self, data: bytes) -> list[str]:
        with self.cond:
            offset = self.log.append(data)
            self.last_output = time.monotonic()
            queries = self.display.scan(data, offset)
            events = self.tracker.feed(data, offset)
            for event in events:
                if isinstance(event, CommandStarted):
                    self.display.add_echo(event.echo_from, event.echo_to, event.shown)
                elif isinstance(event, PromptDrawn):
                    self.display.on_prompt(event.end)
            # A chunk without a marker event changes only the log and ``last_output``: wake
            # just those who look at those (an execute's own wait would only go back to
            # sleep, costing a thread switch per chunk of the echo on the round trip).
            if events or self.pacing.wakes_on_every_chunk:
                self.cond.notify_all()
        # Recorded after the waiters are woken: a command's end does not wait for the cast
        # file's write (the recording keeps the stream's order: one reader thread writes it).
        if self.recording is not None:
            self.recording.output(data)
        return queries

    def _answer(self, queries: list[str], channel: ExecChannel) -> None:
        """Answer terminal queries a program waits on (cursor position, device attributes)."""
        replies = []
        for q in queries:
            if q == "cpr":
                replies.append(self.display.cursor_report())
            elif q == "da1":
                replies.append(DA1_REPLY)
            elif q == "da2":
                replies.append(DA2_REPLY)
        with contextlib.suppress(SandboxError):
            channel.write(b"".join(replies))

    def _current(self, generation: int) -> bool:
        """Whether a reader of shell ``generation`` still serves a live session (a replaced,
        detached or destroyed one must not pause: its channel is closing)."""
        return generation == self._generation and not self.destroyed

    # -- what callers use ----------------------------------------------------------------
    def quiet_since(self) -> float:
        """Since when no output arrived, output the reader holds back counting as arriving
        (``ReadPacing.quiet_since``)."""
        return self.pacing.quiet_since(self.last_output)

    def require_alive(self) -> ExecChannel:
        """The shell's channel, or ``SessionExitedError`` saying why there is none."""
        if self.destroyed:
            raise SessionExitedError(f"session {self.id} was destroyed")
        if not self.alive or self._channel is None:
            error = SessionExitedError(
                f"the shell of session {self.id} has exited"
                + (f" with code {self.exit_code}" if self.exit_code is not None else ""),
            )
            if self.revivable:
                error.hint = (
                    "Call execute (any command): it starts a fresh shell in the same container, "
                    "where background processes still run."
                )
            raise error
        return self._channel

    def touch(self) -> None:
        self._activity_wall = time.time()
        self._activity_mono = time.monotonic()

    @property
    def last_activity_at(self) -> str:
        wall = self._activity_wall
        return self._activity_iso if wall is None else iso_at(wall)

    @last_activity_at.setter
    def last_activity_at(self, value: str) -> None:
        self._activity_iso = value
        self._activity_wall = None

    @property
    def status(self) -> str:
        """ "running" also when the login shell ended but its container runs: the next execute
        starts a fresh shell there (the session and its processes are still usable)."""
        if self.destroyed:
            return "exited"
        return "running" if self.alive or self.revivable else "exited"

    @property
    def busy(self) -> bool:
        """A command runs (or an execute waits for its turn)."""
        with self.cond:
            return (self.tracker.running and self.alive) or self.turn.locked()

    @property
    def idle_s(self) -> float:
        """Seconds since a client last used this session."""
        return time.monotonic() - self._activity_mono

    def wait_ended(self, timeout_s: float) -> bool:
        """Wait until the shell (or the session's command) has ended; False on timeout."""
        with self.cond:
            return self.cond.wait_for(lambda: not self.alive, timeout_s)

    # -- letting go ----------------------------------------------------------------------
    def replace(self) -> ExecChannel | None:
        """Mark the shell as being replaced (its reader's end changes nothing); return its
        channel for the caller to close. Holds ``cond``."""
        self._generation += 1
        return self._channel

    def drop_channel(self) -> None:
        """Close the shell's exec socket so its reader ends (the container is gone)."""
        channel = self._channel
        if channel is not None:
            channel.close()
        self.pacing.attend()

    def detach(self) -> None:
        """Let go of a durable session's shell without ending it (server shutdown, idle TTL):
        tmux keeps it running; the log stays readable here."""
        channel = self._channel
        with self.cond:
            self._generation += 1  # the reader's end is not the shell's
            self.alive = False
            self.cond.notify_all()
        if channel is not None:
            channel.close()
        self.pacing.attend()  # a reader paused by the unattended budget sees the end now

    def close(self) -> int | None:
        """Stop the shell and release local resources; return the shell's exit code."""
        self.destroyed = True
        channel = self._channel
        if channel is not None:
            channel.close()
        self.pacing.attend()
        with self.cond:
            self.alive = False
            self.cond.notify_all()
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
        return self.exit_code
