"""One session: a container, one attached TTY shell in it, and the terminal it draws.

``Session`` is a facade over parts that each own their state:

- ``ShellLink`` (``shell_link``): the shell's exec, the reader thread that drains it into the
  raw log, whether the shell lives; it feeds the marker ``CommandTracker``
  (``sandbox.shell.tracker``) and the ``Display`` (``display``: screen, echoes, read cursor);
- ``TerminalView`` (``terminal_view``): send, read, read_log, resize, raw input;
- ``ProcessControl`` (``process_control``): the foreground job, signals, the ladder's target,
  the sweep, the probe; ``ShellRecovery`` (``recovery``): respawn, revive, reset;
- ``CommandRunner`` (``command_runner``): execute.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path
from typing import Unpack

from sandbox.backends.base import Backend
from sandbox.errors import SandboxError
from sandbox.models import (
    Cursor,
    Destroyed,
    ExecResult,
    SessionCreated,
    SessionFields,
    SessionInfo,
    SessionSummary,
    SignalResult,
    Usage,
)
from sandbox.session.command_runner import CommandRunner
from sandbox.session.command_wait import ExecKeywords, ExecOptions, ProgressFn
from sandbox.session.display import Display
from sandbox.session.input_watch import InputWatch, open_watcher
from sandbox.session.output import OutputFn
from sandbox.session.process_control import ProcessControl
from sandbox.session.profile import project_access
from sandbox.session.recovery import ShellRecovery
from sandbox.session.shell_link import ShellLink
from sandbox.session.spec import SessionSpec, now_iso
from sandbox.session.takeover import Takeover
from sandbox.session.terminal_view import TerminalView
from sandbox.session.waits import Waits
from sandbox.terminal.rawlog import RawLog
from sandbox.terminal.recording import CastRecorder

__all__ = ["ExecKeywords", "OutputFn", "ProgressFn", "Session", "SessionSpec", "now_iso"]


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
        unattended_rate: int = 0,
        record: bool = False,
        waits: Waits | None = None,
    ) -> None:
        self.spec = spec
        self.id = spec.session_id
        self.backend = backend
        self.container_id = container_id
        self.log = RawLog(log_path, max_bytes=log_max_bytes)
        self.execute_max_bytes = execute_max_bytes  # of the log read into one result
        recording = None
        if record:
            cast = log_path.with_name("session.cast")
            recording = CastRecorder(cast, rows=spec.rows, cols=spec.cols, max_bytes=log_max_bytes)
        self.display = Display(self.log, spec.rows, spec.cols)
        self.link = ShellLink(
            spec,
            backend=backend,
            container_id=container_id,
            log=self.log,
            display=self.display,
            recording=recording,
            unattended_rate=unattended_rate,
            waits=waits,
        )
        self.takeover = Takeover()  # a person's hold on the terminal (the web view)
        self.view = TerminalView(self.link, self.takeover, max_bytes=execute_max_bytes)
        self.recovery = ShellRecovery(self.link)
        self.control = ProcessControl(self.link, self.recovery)
        self.input_watch = InputWatch(partial(open_watcher, self.link), self.id)
        self.runner = CommandRunner(
            self.link,
            self.control,
            self.recovery,
            max_bytes=execute_max_bytes,
            input_watch=self.input_watch,
        )
        # what the public surface calls straight through to a part
        self.open_shell = self.link.open_shell
        self.wait_ended = self.link.wait_ended
        self.read_log = self.view.read_log
        self.send = self.view.send
        self.read = self.view.read
        self.resize = self.view.resize
        self.write_raw = self.view.write_raw
        self.wait_output = self.view.wait_output
        self.wait_done = self.control.wait_done
        self.sweep = self.control.sweep
        self.reset = self.recovery.reset

    # -- what it is now --------------------------------------------------------------------
    @property
    def recording(self) -> CastRecorder | None:
        return self.link.recording

    @property
    def rows(self) -> int:
        return self.display.rows

    @property
    def cols(self) -> int:
        return self.display.cols

    @property
    def resets(self) -> int:
        return self.recovery.resets

    @property
    def shell_restarts(self) -> int:
        return self.recovery.shell_restarts

    @property
    def last_activity_at(self) -> str:
        return self.link.last_activity_at

    @last_activity_at.setter
    def last_activity_at(self, value: str) -> None:
        self.link.last_activity_at = value

    @property
    def is_shell(self) -> bool:
        return self.link.is_shell

    @property
    def status(self) -> str:
        return self.link.status

    @property
    def busy(self) -> bool:
        return self.link.busy

    @property
    def shell_alive(self) -> bool:
        """Whether the shell (or the session's command) runs now; a person's terminal on it
        ends when it does, even where the next execute would start a fresh shell."""
        return self.link.alive and not self.link.destroyed

    @property
    def idle_s(self) -> float:
        """Seconds since a client last used this session."""
        return self.link.idle_s

    # -- what it does ----------------------------------------------------------------------
    def execute(
        self, command: str, *, timeout_s: float, **options: Unpack[ExecKeywords]
    ) -> ExecResult:
        """Run ``command`` in the shell and return exactly what it printed and its exit code.

        ``on_output`` receives the command's raw bytes as they arrive (for live streaming);
        ``progress`` gets (elapsed seconds, latest output line) about once a second; setting
        ``cancel`` stops the command with the escalation ladder (``ExecKeywords``).
        """
        self.takeover.check_agent_turn(self.id)
        result = self.runner.execute(command, ExecOptions(timeout_s=timeout_s, **options))
        result.notices[:0] = self.takeover.notices()  # what a person typed: said first, once
        return result

    def signal(self, sig: str = "INT", *, escalate_: bool = True) -> SignalResult:
        return self.control.signal(sig, escalate_=escalate_)

    def close(self) -> Destroyed:
        """Stop the shell and release local resources (the manager removes the container)."""
        self.input_watch.close()
        return Destroyed(destroyed=True, exit_code=self.link.close())

    def detach(self) -> None:
        """Let go of a durable session's shell without ending it (tmux keeps it running)."""
        self.input_watch.close()
        self.link.detach()

    # -- what it says about itself -----------------------------------------------------------
    def created(self) -> SessionCreated:
        s = self.spec
        fields = {name: getattr(s, name) for name in SessionFields.model_fields}
        fields.update(rows=self.rows, cols=self.cols)
        return SessionCreated(
            **fields,
            container_id=self.container_id,
            egress_allow=s.egress,
            **dataclasses.asdict(project_access(s)),
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
        probe = self.control.probe()
        snap = self.display.snapshot()
        usage = Usage() if probe is None else self.control.usage(probe)
        oom = self.control.oom_seen
        if not oom:
            try:
                oom = self.backend.inspect(self.container_id).oom_killed
            except SandboxError:
                oom = False
        created = self.created()
        link = self.link
        if probe is None and link.alive:
            created.notices.append(
                "The session did not answer a look inside it (usage, foreground, cwd are "
                "unknown): a full pids limit does this, as new processes cannot start. The "
                "next execute clears a full pids limit and says what it stopped."
            )
        elif probe is not None and probe.pids_pressure:
            created.notices.append(
                f"The session holds {probe.pids} of its {probe.pids_max} processes (its pids "
                "limit): new processes may fail to start. The next execute kills the biggest "
                "process groups first and says which; signal stops a foreground one now."
            )
        return SessionInfo(
            **created.model_dump(),
            status="running" if self.status == "running" else "exited",
            busy=self.busy,
            exit_code=link.exit_code if not link.alive else link.tracker.last_exit_code,
            oom_killed=oom,
            cursor=Cursor(row=snap.cursor_row, col=snap.cursor_col),
            foreground=probe.foreground if probe else None,
            cwd=probe.cwd if probe else None,
            usage=usage,
            log_bytes=self.log.size,
            attach_command=attach_command,
            last_activity_at=self.last_activity_at,
            resets=self.resets,
            shell_restarts=self.shell_restarts,
        )
