"""``execute``: type one command into the shell and return exactly its output and exit code.

The marker protocol is in ``sandbox.shell.markers`` and ``sandbox.shell.tracker``; the runner
takes the session's turn, types the line (``_type``), waits for the end marker or another
outcome (``sandbox.session.command_wait``), stops the command with the escalation ladder when
it must (``_stop``), and shapes what it printed into an ``ExecResult`` (``_result``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field

from sandbox.errors import (
    InvalidArgumentError,
    SandboxError,
    SessionBusyError,
)
from sandbox.models import ExecResult, LogRange
from sandbox.session import notices
from sandbox.session.command_wait import ExecOptions, wait_for_end
from sandbox.session.input_watch import InputCheck, InputWatch
from sandbox.session.output import OutputStreamer, shape_output
from sandbox.session.process_control import GRACE_S, ProcessControl
from sandbox.session.recovery import ShellRecovery
from sandbox.session.shell_link import ShellLink
from sandbox.shell.ladder import escalate
from sandbox.shell.markers import command_line, new_nonce
from sandbox.shell.tracker import Pending

log = logging.getLogger(__name__)

PROMPT_WAIT_S = 0.5
# Output this large arriving while no command ran means a background job writes to the terminal.
BACKGROUND_WRITES = 4096


@dataclass
class _Run:
    """What happened to one command while it ran and was stopped."""

    t0: float
    resets_before: int
    outcome: str = "done"
    notices: list[str] = field(default_factory=list)
    signals_sent: list[str] = field(default_factory=list)
    reset: bool = False
    restarted: bool = False
    revived: bool = False
    killed: int = 0


class CommandRunner:
    """Runs commands in one session's shell, one at a time."""

    def __init__(
        self,
        link: ShellLink,
        control: ProcessControl,
        recovery: ShellRecovery,
        *,
        max_bytes: int,
        input_watch: InputWatch | None = None,
    ) -> None:
        self.link = link
        self.control = control
        self.recovery = recovery
        self._max_bytes = max_bytes
        self.input_watch = input_watch  # background and idle returns ask it

    def execute(self, command: str, options: ExecOptions) -> ExecResult:
        """Run ``command`` in the shell and return exactly what it printed and its exit code."""
        link = self.link
        if not link.is_shell:
            raise InvalidArgumentError(
                f"session {link.id} runs {link.spec.command!r}, not a shell",
                hint="Use send to type into it and read to see its output.",
            )
        if not command.strip():
            raise InvalidArgumentError("command is empty", hint="Pass the shell command to run.")
        if "\x00" in command:
            raise InvalidArgumentError("command contains a NUL byte", hint="Remove it.")
        link.touch()
        t0 = time.monotonic()
        if not self._acquire_turn(t0 + options.timeout_s, options.cancel):
            if options.cancelled:
                return self._not_started(t0)
            raise SessionBusyError(
                f"session {link.id} is still running another execute after {options.timeout_s:g} s"
            )
        # a background execute asked not to be waited for: it does not slow other floods
        waiting = contextlib.nullcontext() if options.background else link.pacing.waits.waiting()
        link.pacing.background_turn = options.background
        try:
            with waiting:
                run = _Run(t0=t0, resets_before=self.recovery.resets)
                typed = self._type(command, options, run)
                if typed is None:
                    return self._not_started(t0)
                self._wait_and_stop(typed, options, run)
                return self._result(typed, options, run)
        finally:
            link.pacing.background_turn = False
            link.turn.release()

    def _acquire_turn(self, deadline: float, cancel: threading.Event | None) -> bool:
        """Wait for this session's execute lock, in slices so a cancel is noticed."""
        while True:
            remaining = deadline - time.monotonic()
            if cancel is not None and cancel.is_set():
                return False
            if self.link.turn.acquire(timeout=max(0.0, min(remaining, 0.1))):
                self.link.pacing.attend()
                return True
            if remaining <= 0:
                return False

    def _not_started(self, t0: float) -> ExecResult:
        """The result of an execute cancelled before its command was typed."""
        end = self.link.log.size
        return ExecResult(
            session_id=self.link.id,
            output="",
            exit_code=None,
            interrupted=True,
            log_range=LogRange(from_byte=end, to_byte=end),
            duration_ms=int((time.monotonic() - t0) * 1000),
        )

    # -- typing the line -----------------------------------------------------------------
    def _type(self, command: str, options: ExecOptions, run: _Run) -> Pending | None:
        """Make the shell ready (a new one if it was lost, an earlier program put aside or
        waited for, its prompt up) and type the command; None: cancelled before that."""
        link = self.link
        if self.recovery.revive_if_lost():
            run.revived = True
            run.notices.append(self.recovery.revived_notice)
        link.require_alive()
        deadline = time.monotonic() + options.timeout_s
        aside = self.control.put_aside()
        if aside:
            run.notices.append(aside)
        with link.cond:
            if not self._wait_for_earlier(deadline, options):
                return None
            channel = link.require_alive()
            self._wait_for_prompt()
            idle = link.tracker.take_idle_bytes()
            if idle >= BACKGROUND_WRITES:
                run.notices.append(notices.background_writes(idle))
            p = link.tracker.begin(
                new_nonce(),
                sent_offset=link.log.size,
                display=command.replace("\n", "\r\n").encode("utf-8", "replace") + b"\r\n",
            )
            link.display.command_typed()
        channel.write(command_line(command, p.nonce))
        return p

    def _wait_for_earlier(self, deadline: float, options: ExecOptions) -> bool:
        """(Holding ``cond``.) A command left running by a background or idle execute keeps
        the shell busy: wait for it; False when cancelled meanwhile."""
        link = self.link
        while link.tracker.running and link.alive:
            remaining = deadline - time.monotonic()
            if options.cancelled:
                return False
            if remaining <= 0:
                pending = link.tracker.pending
                assert pending is not None
                earlier = pending.display.decode("utf-8", "replace").strip()
                raise SessionBusyError(
                    f"session {link.id} is still running an earlier command: {earlier[:200]!r}",
                    hint="It is working, not waiting for input: wait for it (read with "
                    "wait_for or idle_ms), stop it with signal, or run this in another "
                    "session.",
                )
            link.cond.wait(min(remaining, 0.1))
        return True

    def _wait_for_prompt(self) -> None:
        """(Holding ``cond``.) Type only once readline is up (its prompt marker), so the
        kernel never echoes."""
        link, tracker = self.link, self.link.tracker
        prompt_deadline = time.monotonic() + PROMPT_WAIT_S
        while not tracker.prompt_seen and tracker.prompt_marker_works and link.alive:
            remaining = prompt_deadline - time.monotonic()
            if remaining <= 0:
                tracker.prompt_marker_works = False
                break
            link.cond.wait(remaining)

    # -- waiting and stopping ------------------------------------------------------------
    def _wait_and_stop(self, p: Pending, options: ExecOptions, run: _Run) -> None:
        """Wait for the end marker; replace a shell whose protocol is lost; stop a command
        that timed out or was cancelled."""
        deadline = time.monotonic() + options.timeout_s
        stream = None
        if options.on_output is not None:
            stream = OutputStreamer(self.link.log, p, options.on_output)
        check = None
        if options.idle_after_s is not None and self.input_watch is not None:
            check = InputCheck(self.input_watch, self.link, self.control.wait_done)
        while True:
            run.outcome = wait_for_end(self.link, p, deadline, options, stream, check)
            if run.outcome != "lost" or self._confirm_lost(p):
                break
        if run.outcome == "lost":
            run.restarted = self.recovery.respawn()
            if run.restarted:
                run.notices.append(notices.RESPAWNED)
            else:  # a durable session: the ladder ends with a container reset
                run.outcome = "timeout"
        if run.outcome in ("timeout", "cancelled"):
            self._stop(p, run)
        if stream is not None:
            stream.flush(final=True)

    def _confirm_lost(self, p: Pending) -> bool:
        """A prompt came without ``p``'s end marker: True when the shell really idles at its
        prompt with its markers lost (then it must be replaced), False on a false alarm (a
        program printed a marker-like sequence, or the marker was only late)."""
        with self.link.cond:
            self.link.tracker.lost_since = None
            if p.finished or not self.link.alive:
                return False
        try:
            if self.control.foreground_pgid() is not None:
                return False  # a program runs in front: the prompt marker was not the shell's
        except SandboxError:
            return False  # cannot look: let the timeout decide
        if p.start is None:
            return True  # not even the start marker came: the protocol functions are gone
        self.control.resync()
        return not self.control.wait_done(GRACE_S)

    def _stop(self, p: Pending, run: _Run) -> None:
        """Climb the escalation ladder, then sweep what the command left outside its group."""
        esc = escalate(self.control, grace_s=GRACE_S)
        run.signals_sent, run.reset, run.restarted = (
            esc.signals_sent,
            esc.reset,
            esc.shell_restarted,
        )
        if run.reset or run.restarted or not self.link.alive:
            return
        killed = self.control.sweep(self.link.tracker.start_pid_of(p), p.nonce)
        if killed < 0:  # not even a control command runs: what is left fills the pids
            log.warning("session %s: cannot look for stray processes: resetting", self.link.id)
            killed = 0
            try:
                self.recovery.reset()
                run.reset = True
            except SandboxError as exc:
                log.warning("session %s: reset failed: %s", self.link.id, exc.message)
        run.killed = killed

    # -- the result ----------------------------------------------------------------------
    def _result(self, p: Pending, options: ExecOptions, run: _Run) -> ExecResult:
        link = self.link
        with link.cond:
            finished = p.finished
            shell_died = not link.alive and not finished
            start = p.start if p.start is not None else link.log.size
            end = p.end if p.end is not None else link.log.size
            link.display.command_done(p.after if finished else None, p.prompt_end)
            exit_code = p.exit_code if finished else (link.exit_code if shell_died else None)
        if run.reset:
            exit_code = 137
        self._stop_notices(p, run)
        shell_died = self._after_shell_died(shell_died, exit_code, run)
        run.reset = run.reset or self.recovery.resets > run.resets_before
        output, truncated, total = shape_output(
            link.log, start, end, p.newlines, options.max_lines, options.strip_ansi, self._max_bytes
        )
        oom = exit_code == 137 and not run.reset and self.control.check_oom()
        if shell_died and link.status != "running":  # the container itself ended
            with contextlib.suppress(SandboxError):
                oom = oom or link.backend.inspect(link.container_id).oom_killed
            run.notices.append(notices.container_stopped(oom))
        link.touch()
        return ExecResult(
            session_id=link.id,
            output=output,
            exit_code=exit_code,
            timed_out=run.outcome == "timeout",
            interrupted=run.outcome == "cancelled",
            signals_sent=run.signals_sent,
            still_running=not finished and not shell_died and not run.reset and not run.restarted,
            truncated=truncated,
            total_lines=total,
            log_range=LogRange(from_byte=start, to_byte=end),
            duration_ms=int((time.monotonic() - run.t0) * 1000),
            oom_killed=oom,
            idle=run.outcome in ("idle", "input"),
            waiting_for_input=run.outcome == "input",
            session_reset=run.reset,
            shell_exited=shell_died,
            shell_restarted=run.restarted or run.revived,
            stray_processes_killed=run.killed,
            notices=run.notices,
        )

    def _stop_notices(self, p: Pending, run: _Run) -> None:
        if p.pressure:
            run.notices.append(notices.pressure_notice(p.pressure))
        if run.restarted and not run.notices:  # the ladder replaced the shell to stop it
            run.notices.append(notices.RESPAWNED)
        if run.reset and not any("reset" in n for n in run.notices):
            run.notices.append(notices.RESET)

    def _after_shell_died(self, shell_died: bool, exit_code: int | None, run: _Run) -> bool:
        """A shell killed by the command is replaced now; one that exited is named (the next
        execute starts a fresh one). Returns whether the shell is still dead."""
        if not shell_died:
            return False
        if self.recovery.revive_if_lost(after_exit=False):  # killed: replace it now
            run.restarted = True
            run.notices.append(self.recovery.revived_notice)
            return False
        if self.link.status == "running":
            run.notices.append(notices.shell_exited(exit_code))
        return True
