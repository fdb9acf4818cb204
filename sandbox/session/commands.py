"""``execute``: type one command into the shell and return exactly its output and exit code.

The marker protocol is in ``sandbox.shell.markers``; this mixin of ``Session`` takes the session's
turn, types the line, waits for the end marker (or a timeout, an idle stretch, a cancel, a
lost protocol), runs the escalation ladder when the command must be stopped, and shapes what
the command printed into an ``ExecResult``.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable

from sandbox.errors import (
    InvalidArgumentError,
    SandboxError,
    SessionBusyError,
    SessionNotFoundError,
)
from sandbox.models import ExecResult, LogRange
from sandbox.session.control import GRACE_S
from sandbox.session.input_watch import SETTLE_S, SHELL_CONFIRM_S, InputPacer
from sandbox.session.output import OutputFn, OutputStreamer, shape_output
from sandbox.session.recovery import RecoveryMixin
from sandbox.session.state import Pending
from sandbox.shell.foreground import foreground_script, parse_foreground
from sandbox.shell.ladder import escalate
from sandbox.shell.markers import command_line, new_nonce
from sandbox.terminal.stream import clean_transcript

log = logging.getLogger(__name__)

ProgressFn = Callable[[float, str], None]

PROMPT_WAIT_S = 0.5
PROGRESS_EVERY_S = 1.0
# A prompt marker arrived but not the command's end marker: the shell is idle at its prompt and
# its protocol is broken (stdout redirected, functions unset). Check after this much quiet.
LOST_QUIET_S = 0.3
# While a command is quiet this long, ask the engine whether the container still runs: a
# container that died (a gVisor sandbox killed or out of memory) may leave its exec socket open,
# and the reader would wait on it until the command's timeout.
LIVENESS_EVERY_S = 2.0
# A program left in the foreground that has printed nothing for this long may be waiting for
# input (then it is suspended); one that printed more recently is working.
LEFTOVER_QUIET_S = 0.5
SUSPEND_WAIT_S = 0.5
# Output this large arriving while no command ran means a background job writes to the terminal.
BACKGROUND_WRITES = 4096
RESPAWNED = (
    "The shell stopped answering (its output redirected, its functions replaced, or it was "
    "replaced itself) and a fresh shell took its place in the same container: the directory, "
    "variables and functions are back to their defaults; background processes and files are "
    "as they were."
)


class CommandsMixin(RecoveryMixin):
    """execute for ``Session``."""

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
        notices: list[str] = []
        revived = self._revive_if_lost()
        if revived:
            notices.append(self.revived_notice)
        channel = self._require_alive()
        deadline = time.monotonic() + timeout_s
        aside = self._put_aside()
        if aside:
            notices.append(aside)
        with self._cond:
            # A command left running by a background/idle execute keeps the shell busy.
            while self._pending is not None and not self._pending.finished and self._alive:
                remaining = deadline - time.monotonic()
                if cancel is not None and cancel.is_set():
                    return self._not_started(t0)
                if remaining <= 0:
                    earlier = self._pending.display.decode("utf-8", "replace").strip()
                    raise SessionBusyError(
                        f"session {self.id} is still running an earlier command: {earlier[:200]!r}",
                        hint="It is working, not waiting for input: wait for it (read with "
                        "wait_for or idle_ms), stop it with signal, or run this in another "
                        "session.",
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
            if self._idle_bytes >= BACKGROUND_WRITES:
                notices.append(
                    f"Something in the background wrote {self._idle_bytes} bytes to the terminal "
                    "since the last command, and may still: its lines can be mixed into this "
                    "output. `jobs` lists the shell's jobs; stop one with `kill %N`, or start it "
                    "with its output redirected to a file."
                )
            self._idle_bytes = 0
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
        pacer = None
        if idle_timeout_s is not None:  # return as soon as the program waits for input
            self._input_watch.start()
            pacer = InputPacer()
        stream = OutputStreamer(self.log, p, on_output) if on_output is not None else None
        while True:
            outcome = self._wait(
                p, deadline, idle_timeout_s, background, progress, cancel, stream, pacer
            )
            if outcome != "lost" or self._confirm_lost(p):
                break
        signals_sent: list[str] = []
        reset = restarted = False
        killed = 0
        if outcome == "lost":
            restarted = self.respawn()
            if not restarted:  # a durable session: the ladder ends with a container reset
                outcome = "timeout"
            else:
                notices.append(RESPAWNED)
        if outcome in ("timeout", "cancelled"):
            esc = escalate(self, grace_s=GRACE_S)
            signals_sent, reset, restarted = esc.signals_sent, esc.reset, esc.shell_restarted
            if not reset and not restarted and self._alive:
                killed = self.sweep(self._command_start_pid(p), p.nonce)
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
        if p.pressure:
            notices.append(pressure_notice(p.pressure))
        if restarted and not notices:  # the ladder replaced the shell to stop the command
            notices.append(RESPAWNED)
        if reset and not any("reset" in n for n in notices):
            notices.append(
                "The container was restarted to stop this command (nothing else could): "
                "processes are gone, files in the project and in /tmp stay."
            )
        if shell_died and self._revive_if_lost(after_exit=False):  # killed: replace it now
            restarted, shell_died = True, False
            notices.append(self.revived_notice)
        elif shell_died and self.status == "running":
            notices.append(
                f"The shell exited (code {exit_code}); the next execute starts a fresh shell in "
                "this container, where background processes keep running."
            )
        reset = reset or self.resets > resets_before
        output, truncated, total = shape_output(
            self.log, start, end, newlines, max_lines, strip_ansi, self._execute_max_bytes
        )
        oom = False
        if exit_code == 137 and not reset:
            oom = self._check_oom()
        if shell_died and self.status != "running":  # the container itself ended
            with contextlib.suppress(SandboxError):
                oom = oom or self.backend.inspect(self.container_id).oom_killed
            notices.append(
                "The session's container stopped"
                + (" because it ran out of memory" if oom else " (killed from outside?)")
                + ": this session has ended. Create a new one"
                + (" with more memory_mb." if oom else ".")
            )
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
            idle=outcome in ("idle", "input"),
            waiting_for_input=outcome == "input",
            session_reset=reset,
            shell_exited=shell_died,
            shell_restarted=restarted or revived,
            stray_processes_killed=killed,
            notices=notices,
        )
        self._touch()
        return result

    def _put_aside(self) -> str | None:
        """An earlier command still holds the terminal. When its program waits for input (a
        REPL, an editor, ``cat``), suspend it so this command can run, and say how to get it
        back; a shell builtin such as ``read`` is interrupted instead. A working program is
        left alone (the caller waits for it, then names it in SESSION_BUSY)."""
        with self._cond:
            p = self._pending
            if p is None or p.finished or not self._alive or self._shell_pid is None:
                return None
            quiet = time.monotonic() - self._last_output
            shell = self._shell_pid
        if not self._in_container() or self.spec.durable:
            return None
        if quiet < LEFTOVER_QUIET_S and not self.wait_done(LEFTOVER_QUIET_S - quiet):
            with self._cond:
                if time.monotonic() - self._last_output < LEFTOVER_QUIET_S:
                    return None  # it is printing: working
        try:
            result = self.backend.run(
                self.container_id, ["sh", "-c", foreground_script(shell)], user=self.spec.user
            )
        except SandboxError:
            return None
        fg = parse_foreground(result.output.decode("utf-8", "replace"), shell)
        if fg is None or not fg.waiting or p.finished:
            return None
        earlier = p.display.decode("utf-8", "replace").strip()[:120]
        if fg.is_shell:
            self.interrupt()
            self.wait_done(GRACE_S)
            return (
                f"An earlier command ({earlier!r}) was waiting for input in the shell itself "
                "and was interrupted (Ctrl+C) so this command could run."
            )
        before = self.log.size
        self.signal_group(fg.pgid, "TSTP")
        if not self.wait_done(SUSPEND_WAIT_S):
            self.signal_group(fg.pgid, "STOP")  # it ignores SIGTSTP
            self.wait_done(GRACE_S)
        job = re.search(rb"\[(\d+)\]\+\s+Stopped", self.log.read(before, self.log.size))
        n = job.group(1).decode() if job else "1"
        return (
            f"{fg.args!r}, left open by an earlier command, was waiting for input: it was "
            f"suspended (job %{n}) so this command could run. `fg %{n}` brings it back to the "
            f"foreground (then type into it with send), `bg %{n}` lets it run in the "
            f"background, `kill %{n}` ends it."
        )

    def _wait(
        self,
        p: Pending,
        deadline: float,
        idle_timeout_s: float | None,
        background: bool,
        progress: ProgressFn | None,
        cancel: threading.Event | None,
        stream: OutputStreamer | None = None,
        pacer: InputPacer | None = None,
    ) -> str:
        next_progress = time.monotonic() + PROGRESS_EVERY_S
        next_check = time.monotonic() + LIVENESS_EVERY_S
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
                    ask_at = self._input_ask_at(p, pacer)
                    if ask_at is not None and now >= ask_at:
                        break
                    if ask_at is not None:
                        wake = min(wake, ask_at)
                    if cancel is not None:
                        wake = min(wake, now + 0.1)
                    if progress is not None and now >= next_progress:
                        break
                    if stream is not None and stream.pending():
                        break
                    if now >= next_check:
                        break
                    wake = min(wake, next_check)
                    self._cond.wait(max(0.0, wake - now))
            if pacer is not None and self._waits_for_input(p, pacer):
                return "input"
            if time.monotonic() >= next_check:
                quiet = time.monotonic() - self._last_output >= LIVENESS_EVERY_S
                next_check = time.monotonic() + LIVENESS_EVERY_S
                if quiet and self._container_gone():
                    self._drop_channel()  # the reader ends; the loop sees the shell gone
            if stream is not None:
                stream.flush()
            if progress is not None and time.monotonic() >= next_progress:
                next_progress = time.monotonic() + PROGRESS_EVERY_S
                with contextlib.suppress(Exception):
                    progress(time.monotonic() - p.sent_at, self._last_line(p))

    def _input_ask_at(self, p: Pending, pacer: InputPacer | None) -> float | None:
        """When to ask the kernel next whether the command waits for input (None: not now:
        no pacer, the command has not started, or this kernel does not say)."""
        if pacer is None or p.start is None or self._shell_pid is None:
            return None
        if self._input_watch.unsupported:
            return None
        return pacer.due_at(self._last_output)

    def _waits_for_input(self, p: Pending, pacer: InputPacer) -> bool:
        """Ask, if it is time, whether the command's program waits for terminal input; yes
        only when nothing arrived meanwhile (what it wrote before blocking is in the log)."""
        ask_at = self._input_ask_at(p, pacer)
        shell = self._shell_pid
        if ask_at is None or shell is None or time.monotonic() < ask_at:
            return False
        before = self._last_output
        verdict = self._input_watch.ask(shell)
        pacer.asked(before, time.monotonic())
        if verdict not in ("input", "shell"):
            return False
        # the shell in front may be back at its prompt, its end marker still on the way
        settle = SHELL_CONFIRM_S if verdict == "shell" else SETTLE_S
        if self.wait_done(settle) or self._last_output != before:
            return False
        return verdict == "input" or self._input_watch.ask(shell) == "shell"

    def _container_gone(self) -> bool:
        """Whether the engine says the session's container no longer runs (one inspect)."""
        try:
            return self.backend.inspect(self.container_id).status != "running"
        except SessionNotFoundError:
            return True
        except SandboxError:
            return False  # the engine does not answer: that says nothing of the container

    def _drop_channel(self) -> None:
        """Close the shell's exec socket so its reader ends (the container is gone)."""
        channel = self._channel
        if channel is not None:
            channel.close()
        self._attend()

    def _command_start_pid(self, p: Pending) -> int | None:
        """The pid namespace's last pid just before command ``p`` started (None: unknown)."""
        known = self._start_pid
        return known[1] if known is not None and known[0] == p.nonce else None

    def _last_line(self, p: Pending) -> str:
        if p.start is None:
            return ""
        end = self.log.size
        text = clean_transcript(self.log.read(max(p.start, end - 4096), end))
        lines = [ln for ln in text.splitlines() if ln.strip()]
        return lines[-1][:200] if lines else ""


def pressure_notice(report: str) -> str:
    """What the shell's pids-pressure report (``p:CUR:MAX:PGID/COUNT/NAME,...``) tells the
    agent: which process groups were killed so that its command could run."""
    _, current, limit, groups = [*report.split(":", 3), "", "", ""][:4]
    killed = []
    for group in filter(None, groups.split(",")):
        pgid, _, rest = group.partition("/")
        count, _, name = rest.partition("/")
        killed.append(f"group {pgid} ({count} processes{', ' + name if name else ''})")
    what = (
        "the biggest process groups were killed: " + "; ".join(killed)
        if killed
        else "nothing the shell may stop was found to kill"
    )
    return (
        f"The session was at {current} of its {limit} processes (its pids limit) when this "
        f"command started, so {what}, before the command ran. A background job that forks "
        "without end (a loop starting '&' jobs) does this; bound it or stop it with signal."
    )
