"""One session: a container, one attached TTY shell in it, and the terminal it draws.

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
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sandbox.backends.base import Backend, ExecChannel
from sandbox.errors import (
    InvalidArgumentError,
    SandboxError,
    SessionBusyError,
    SessionExitedError,
)
from sandbox.execute import (
    SHELL_ARGV,
    SHELL_RC,
    MarkerScanner,
    command_line,
    new_nonce,
    resync_line,
)
from sandbox.keys import encode_keys, encode_text, parse_paste
from sandbox.models import (
    Cursor,
    Destroyed,
    ExecResult,
    Limits,
    LogChunk,
    LogRange,
    ReadResult,
    ResizeResult,
    SendResult,
    SessionCreated,
    SessionInfo,
    SessionSummary,
    SignalResult,
    Usage,
)
from sandbox.probe import ProbeResult, parse_probe, probe_script
from sandbox.rawlog import RawLog
from sandbox.signals import SIGNAL_NUMBERS, escalate
from sandbox.terminal import (
    DA1_REPLY,
    DA2_REPLY,
    LazyScreen,
    ScreenSnapshot,
    StreamScanner,
    clean_transcript,
)

log = logging.getLogger(__name__)

ProgressFn = Callable[[float, str], None]
OutputFn = Callable[[bytes], None]

READY_TIMEOUT_S = 30.0  # generous: a loaded engine can take seconds to start an exec
GRACE_S = 1.0
PROMPT_WAIT_S = 0.5
PROGRESS_EVERY_S = 1.0
SEND_SETTLE_MS = 300  # send with wait_ms: return once the program paused this long
SCROLLBACK_BYTES = 4 * 1024 * 1024
RESET_NOTICE = b"\r\n[sandbox: the container was reset to stop a runaway job]\r\n"


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class SessionSpec:
    """What a session was created with (the create fields of the contract)."""

    session_id: str
    name: str
    image: str
    project_path: str
    workdir: str
    rows: int
    cols: int
    network: bool
    durable: bool
    limits: Limits
    created_at: str
    read_only_project: bool
    command: list[str] | None
    user: str  # "uid:gid" of the shell
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class _Pending:
    """The command the shell is running (or was), tracked by the reader thread."""

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

    @property
    def finished(self) -> bool:
        return self.end is not None


class Session:
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
        self._pending: _Pending | None = None
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

    def _require_alive(self) -> ExecChannel:
        if self._destroyed:
            raise SessionExitedError(f"session {self.id} was destroyed")
        if not self._alive or self._channel is None:
            raise SessionExitedError(
                f"the shell of session {self.id} has exited"
                + (f" with code {self._exit_code}" if self._exit_code is not None else ""),
            )
        return self._channel

    def _touch(self) -> None:
        self.last_activity_at = now_iso()

    # -- execute -------------------------------------------------------------------------
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
            p = _Pending(
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
        stream = _Streamer(self, p, on_output) if on_output is not None else None
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
        output, truncated, total = self._output(start, end, newlines, max_lines, strip_ansi)
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
        p: _Pending,
        deadline: float,
        idle_timeout_s: float | None,
        background: bool,
        progress: ProgressFn | None,
        cancel: threading.Event | None,
        stream: _Streamer | None = None,
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

    def _last_line(self, p: _Pending) -> str:
        if p.start is None:
            return ""
        end = self.log.size
        text = clean_transcript(self.log.read(max(p.start, end - 4096), end))
        lines = [ln for ln in text.splitlines() if ln.strip()]
        return lines[-1][:200] if lines else ""

    def _output(
        self, start: int, end: int, newlines: int, max_lines: int, strip_ansi: bool
    ) -> tuple[str, bool, int]:
        cut = max(start, end - self._execute_max_bytes)
        raw = self.log.read(cut, end)
        byte_cut = cut > start
        if byte_cut:
            nl = raw.find(b"\n")
            raw = raw[nl + 1 :] if nl >= 0 else b""
        text = clean_transcript(raw, strip_ansi=strip_ansi)
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
            trailing = "\n"
        else:
            trailing = ""
        total = newlines + (0 if trailing else 1) if byte_cut else len(lines)
        truncated = byte_cut
        if max_lines >= 0 and len(lines) > max_lines:
            lines = lines[len(lines) - max_lines :] if max_lines else []
            truncated = True
        out = "\n".join(lines) + (trailing if lines else "")
        return out, truncated, total

    def _check_oom(self) -> bool:
        probe = self._probe()
        if probe is None or probe.oom_kills is None:
            return False
        if probe.oom_kills > self._oom_baseline:
            self._oom_baseline = probe.oom_kills
            self._oom_seen = True
            return True
        return False

    # -- escalation target (see sandbox.signals) -----------------------------------------
    def interrupt(self) -> None:
        with contextlib.suppress(SandboxError):
            self._require_alive().write(b"\x03")

    def foreground_pgid(self) -> int | None:
        pid = self._shell_pid
        if pid is None:
            return None
        result = self.backend.run(
            self.container_id,
            ["sh", "-c", f"ps -o tpgid= -p {int(pid)}"],
            user=self.spec.user,
        )
        if result.exit_code != 0 and not result.output.strip():
            raise SessionBusyError(
                f"cannot run a control command in session {self.id} (exit {result.exit_code})"
            )
        try:
            tpgid = int(result.output.strip() or b"0")
        except ValueError as exc:
            raise SessionBusyError(f"cannot read the foreground job: {result.output!r}") from exc
        return tpgid if tpgid > 0 and tpgid != pid else None

    def signal_group(self, pgid: int, signal: str) -> bool:
        number = SIGNAL_NUMBERS[signal]
        try:
            result = self.backend.run(
                self.container_id,
                ["kill", f"-{number}", "--", f"-{int(pgid)}"],
                user=self.spec.user,
            )
        except SandboxError:
            return False
        if result.exit_code != 0:
            log.info("kill -%s -%s: %s", signal, pgid, result.output.decode(errors="replace"))
        return result.exit_code == 0 or b"No such process" in result.output

    def wait_done(self, grace_s: float) -> bool:
        deadline = time.monotonic() + grace_s
        with self._cond:
            while True:
                p = self._pending
                if p is None or p.finished or not self._alive:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)

    def resync(self) -> None:
        p = self._pending
        if p is not None and not p.finished:
            with contextlib.suppress(SandboxError):
                self._require_alive().write(resync_line(p.nonce, 130))

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

    # -- raw access (a person's terminal: `sandbox shell`, `attach`) -------------------------
    def write_raw(self, data: bytes) -> None:
        """Type bytes into the terminal exactly as given."""
        self._require_alive().write(data)
        self._touch()

    def wait_output(self, offset: int, timeout_s: float) -> int:
        """Block until the log grows past ``offset``, the shell ends, or the timeout; return the
        log's size (read the new bytes with ``log.read(offset, size)``)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self.log.size <= offset and self._alive:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            return self.log.size

    # -- send / read ---------------------------------------------------------------------
    def send(
        self,
        *,
        text: str | None = None,
        keys: list[str] | None = None,
        paste: bool | str = "auto",
        wait_ms: int = 0,
        view: str = "new",
    ) -> SendResult:
        channel = self._require_alive()
        if text is None and not keys:
            raise InvalidArgumentError(
                "send needs text or keys", hint='e.g. text="y\\n" or keys=["ctrl+c"]'
            )
        data = b""
        if text:
            data += encode_text(
                text, paste=parse_paste(paste), bracketed_paste_mode=self._scanner.bracketed_paste
            )
        if keys:
            data += encode_keys(keys, application_cursor=self._scanner.application_cursor)
        self._touch()
        channel.write(data)
        if wait_ms <= 0:
            return SendResult(bytes_sent=len(data))
        read = self.read(view=view, idle_ms=min(wait_ms, SEND_SETTLE_MS), timeout_ms=wait_ms)
        return SendResult(bytes_sent=len(data), **read.model_dump())

    def read(
        self,
        *,
        view: str = "new",
        strip_ansi: bool = True,
        wait_for: str | None = None,
        timeout_ms: int = 0,
        idle_ms: int | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> ReadResult:
        if view not in ("new", "screen", "scrollback"):
            raise InvalidArgumentError(
                f"unknown view {view!r}", hint='view is "new", "screen" or "scrollback".'
            )
        pattern = None
        if wait_for:
            try:
                pattern = re.compile(wait_for, re.MULTILINE)
            except re.error as exc:
                raise InvalidArgumentError(
                    f"wait_for is not a valid regular expression: {exc}",
                    hint="Use Python regex syntax; escape special characters.",
                ) from exc
        self._touch()
        called = time.monotonic()
        deadline = called + max(0, timeout_ms) / 1000
        matched: bool | None = None
        idle = False
        while True:
            content, lines, has_more = self._content(view, strip_ansi, offset, limit, peek=True)
            if pattern is not None and pattern.search(content):
                matched = True
                break
            now = time.monotonic()
            with self._cond:
                last = max(self._last_output, called)  # quiet counts from this call at the earliest
                quiet = now - last
                if idle_ms is not None and quiet * 1000 >= idle_ms and pattern is None:
                    idle = True
                    break
                if now >= deadline or not self._alive:
                    idle = idle_ms is not None and quiet * 1000 >= idle_ms
                    if pattern is not None:
                        matched = False
                    break
                wake = deadline
                if idle_ms is not None:
                    wake = min(wake, last + idle_ms / 1000)
                self._cond.wait(max(0.005, min(wake - now, 0.25)))
        content, lines, has_more = self._content(view, strip_ansi, offset, limit, peek=False)
        snap = self._snapshot()
        with self._cond:
            p = self._pending
            busy = p is not None and not p.finished and self._alive
            exit_code = self._exit_code if not self._alive else self._last_exit_code
            exited = not self._alive
        return ReadResult(
            content=content,
            lines=lines,
            cursor=Cursor(row=snap.cursor_row, col=snap.cursor_col),
            rows=snap.rows,
            cols=snap.cols,
            alternate_screen=snap.alternate_screen,
            title=snap.title,
            matched=matched,
            idle=idle,
            exited=exited,
            exit_code=exit_code,
            has_more=has_more,
            busy=busy,
        )

    def _content(
        self, view: str, strip_ansi: bool, offset: int, limit: int | None, *, peek: bool
    ) -> tuple[str, int, bool]:
        if view == "screen":
            snap = self._snapshot()
            return snap.content, len(snap.lines), False
        end = self.log.size
        if view == "new":
            with self._cond:
                start = self._read_offset
                if not peek:
                    self._read_offset = end
            has_more = end - start > self._execute_max_bytes
            raw = self.log.read(max(start, end - self._execute_max_bytes), end)
            text = clean_transcript(raw, strip_ansi=strip_ansi)
            return text, text.count("\n") + (1 if text and not text.endswith("\n") else 0), has_more
        # scrollback: history lines from the cleaned transcript, paged from the end
        raw = self._display_read(max(0, end - SCROLLBACK_BYTES), end)
        all_lines = clean_transcript(raw, strip_ansi=strip_ansi).split("\n")
        if all_lines and all_lines[-1] == "":
            all_lines.pop()
        limit = 100 if limit is None else max(0, limit)
        stop = len(all_lines) - max(0, offset)
        begin = max(0, stop - limit)
        page = all_lines[begin : max(0, stop)]
        return "\n".join(page), len(page), begin > 0 or end > SCROLLBACK_BYTES

    def _display_read(self, start: int, stop: int) -> bytes:
        """Log bytes for the views people look at (screen, scrollback): each command's
        protocol line (``__sb_s NONCE; eval $'...'``) is shown as the command itself."""
        data = self.log.read(start, stop)
        with self._cond:
            echoes = [e for e in self._echoes if e[0] < stop and e[1] > start]
        if not echoes:
            return data
        out: list[bytes] = []
        pos = start
        for a, b, shown in echoes:
            if a >= pos:
                out.append(data[pos - start : a - start])
                if b <= stop:
                    out.append(shown)
            pos = min(max(pos, b), stop)
        out.append(data[pos - start :])
        return b"".join(out)

    def _snapshot(self) -> ScreenSnapshot:
        with self._screen_lock:
            self._screen.catch_up(self.log.size, self._display_read, self._scanner)
            return self._screen.snapshot()

    # -- signal / resize / read_log ------------------------------------------------------
    def signal(self, sig: str = "INT", *, escalate_: bool = True) -> SignalResult:
        self._require_alive()
        sig = sig.upper().removeprefix("SIG")
        if sig not in SIGNAL_NUMBERS:
            raise InvalidArgumentError(
                f"unknown signal {sig!r}", hint=f"One of {', '.join(SIGNAL_NUMBERS)}."
            )
        self._touch()
        before = self._probe()
        fg_before = before.foreground if before else None
        if before is None or before.foreground_pgid is None:
            return SignalResult(
                stopped=True, signals_sent=[], foreground_before=None, foreground_after=None
            )
        if escalate_ and sig in ("INT", "TERM", "KILL"):
            esc = self._escalate_job(before.foreground_pgid, sig)
            sent, reset = esc
        else:
            ok = self.signal_group(before.foreground_pgid, sig)
            sent, reset = ([f"SIG{sig}"] if ok else []), False
            time.sleep(0.05)
        after = None if reset else self._probe()
        fg_after = after.foreground if after else None
        stopped = reset or after is None or after.foreground_pgid != before.foreground_pgid
        return SignalResult(
            stopped=stopped,
            signals_sent=sent,
            foreground_before=fg_before,
            foreground_after=fg_after,
            session_reset=reset,
        )

    def _escalate_job(self, pgid: int, start: str) -> tuple[list[str], bool]:
        sent: list[str] = []
        ladder = ["INT", "TERM", "KILL"]
        for sig in ladder[ladder.index(start) :]:
            if not self.signal_group(pgid, sig):
                self.reset()
                return sent, True
            sent.append(f"SIG{sig}")
            deadline = time.monotonic() + GRACE_S
            while time.monotonic() < deadline:
                try:
                    current = self.foreground_pgid()
                except SandboxError:
                    self.reset()
                    return sent, True
                if current != pgid:
                    return sent, False
                time.sleep(0.1)
        return sent, False

    def resize(self, rows: int, cols: int) -> ResizeResult:
        if not (2 <= rows <= 1000 and 10 <= cols <= 1000):
            raise InvalidArgumentError(
                f"bad terminal size {rows}x{cols}", hint="rows 2..1000, cols 10..1000"
            )
        channel = self._require_alive()
        channel.resize(rows, cols)
        with self._screen_lock:
            self._screen.resize(rows, cols)
        self.rows, self.cols = rows, cols
        self._touch()
        return ResizeResult(rows=rows, cols=cols)

    def read_log(
        self, from_byte: int = 0, max_bytes: int = 65536, strip_ansi: bool = False
    ) -> LogChunk:
        if max_bytes <= 0 or max_bytes > 1024 * 1024:
            raise InvalidArgumentError(
                f"max_bytes must be 1..1048576, got {max_bytes}", hint="Page with next_byte."
            )
        total = self.log.size
        start = total + from_byte if from_byte < 0 else from_byte
        start = max(0, min(start, total))
        raw = self.log.read(start, start + max_bytes)
        # never cut a UTF-8 sequence in two: the next page starts where this one stopped
        if start + len(raw) < total:
            raw = _trim_partial_utf8(raw)
        chunk = (
            clean_transcript(raw, strip_ansi=True) if strip_ansi else raw.decode("utf-8", "replace")
        )
        nxt = start + len(raw)
        return LogChunk(
            chunk=chunk, from_byte=start, next_byte=nxt, eof=nxt >= total, total_bytes=total
        )

    # -- info ----------------------------------------------------------------------------
    def _probe(self) -> ProbeResult | None:
        pid = self._shell_pid
        if pid is None or not self._alive:
            return None
        try:
            result = self.backend.run(
                self.container_id, ["sh", "-c", probe_script(pid)], user=self.spec.user
            )
        except SandboxError as exc:
            log.info("probe of %s failed: %s", self.id, exc)
            return None
        return parse_probe(result.output.decode("utf-8", "replace"), pid)

    @property
    def busy(self) -> bool:
        with self._cond:
            p = self._pending
            return (p is not None and not p.finished and self._alive) or self._exec_lock.locked()

    @property
    def status(self) -> str:
        return "running" if self._alive and not self._destroyed else "exited"

    def created(self) -> SessionCreated:
        s = self.spec
        return SessionCreated(
            session_id=s.session_id,
            name=s.name,
            container_id=self.container_id,
            image=s.image,
            project_path=s.project_path,
            workdir=s.workdir,
            rows=self.rows,
            cols=self.cols,
            network=s.network,
            durable=s.durable,
            limits=s.limits,
            created_at=s.created_at,
            read_only_project=s.read_only_project,
            command=s.command,
        )

    def summary(self) -> SessionSummary:
        s = self.spec
        return SessionSummary(
            session_id=s.session_id,
            name=s.name,
            project_path=s.project_path,
            status="running" if self.status == "running" else "exited",
            busy=self.busy,
            durable=s.durable,
            created_at=s.created_at,
            last_activity_at=self.last_activity_at,
        )

    def info(self, attach_command: str) -> SessionInfo:
        probe = self._probe()
        snap = self._snapshot()
        usage = Usage()
        if probe is not None:
            cpu_percent = None
            now = time.monotonic()
            if probe.cpu_s is not None:
                prev = self._cpu_sample or (self._started_mono, 0.0)
                elapsed = now - prev[0]
                if elapsed > 0.05:
                    cpu_percent = round(100 * (probe.cpu_s - prev[1]) / elapsed, 1)
                self._cpu_sample = (now, probe.cpu_s)
            usage = Usage(memory_mb=probe.memory_mb, cpu_percent=cpu_percent, pids=probe.pids)
            if probe.oom_kills:
                self._oom_seen = True
        oom = self._oom_seen
        with contextlib.suppress(SandboxError):
            oom = oom or self.backend.inspect(self.container_id).oom_killed
        return SessionInfo(
            **self.created().model_dump(),
            status="running" if self.status == "running" else "exited",
            busy=self.busy,
            exit_code=self._exit_code if not self._alive else self._last_exit_code,
            oom_killed=oom,
            cursor=Cursor(row=snap.cursor_row, col=snap.cursor_col),
            foreground=probe.foreground if probe else None,
            cwd=probe.cwd if probe else None,
            usage=usage,
            log_bytes=self.log.size,
            attach_command=attach_command,
            last_activity_at=self.last_activity_at,
            resets=self.resets,
        )

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


class _Streamer:
    """Hands a running command's raw bytes to a callback as they arrive (markers held back)."""

    def __init__(self, session: Session, pending: _Pending, fn: OutputFn) -> None:
        self._session = session
        self._p = pending
        self._fn = fn
        self._sent: int | None = None
        self._looked_at = -1

    def pending(self) -> bool:
        """New bytes arrived since the last flush (called with the session's lock held)."""
        return self._p.start is not None and self._session.log.size != self._looked_at

    def flush(self, *, final: bool = False) -> None:
        p = self._p
        self._looked_at = self._session.log.size
        if p.start is None:
            return
        begin = self._sent if self._sent is not None else p.start
        end = p.end if p.end is not None else self._session.log.size
        if end <= begin:
            return
        data = self._session.log.read(begin, end)
        if p.end is None and not final:
            # hold back what may be the beginning of the end marker
            esc = data.rfind(b"\x1b", max(0, len(data) - 96))
            if esc >= 0:
                data = data[:esc]
        if not data:
            return
        self._sent = begin + len(data)
        with contextlib.suppress(Exception):
            self._fn(data)


def _trim_partial_utf8(raw: bytes) -> bytes:
    """Drop an incomplete UTF-8 sequence at the end (at most 3 bytes)."""
    for back in range(1, min(4, len(raw)) + 1):
        byte = raw[-back]
        if byte & 0xC0 == 0x80:  # continuation byte: keep looking for the lead
            continue
        if byte & 0x80 == 0:
            return raw
        need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4
        return raw if back >= need else raw[:-back]
    return raw
