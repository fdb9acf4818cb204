"""Looking into and stopping what runs in a session's container: the foreground job, signals,
the escalation ladder's target, the sweep of stray processes, the one-exec probe (usage, cwd),
and a program left waiting for input put aside so the next command can run.

Every look and signal is a control command run in the container as the shell's user.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time

from sandbox.backends.base import RunResult
from sandbox.config import KEEPALIVE_UID
from sandbox.errors import InvalidArgumentError, SandboxError, SessionBusyError
from sandbox.models import SignalResult, Usage
from sandbox.session.recovery import ShellRecovery
from sandbox.session.shell_link import ShellLink
from sandbox.shell.foreground import foreground_script, parse_foreground
from sandbox.shell.ladder import LADDER, SIGNAL_NUMBERS, JobTarget, escalate
from sandbox.shell.markers import resync_line
from sandbox.shell.probe import FOREGROUND_GROUP_SH, ProbeResult, parse_probe, probe_script
from sandbox.shell.sweep import parse_sweep, sweep_script

log = logging.getLogger(__name__)

GRACE_S = 1.0
# A program left in the foreground that has printed nothing for this long may be waiting for
# input (then it is suspended); one that printed more recently is working.
LEFTOVER_QUIET_S = 0.5
SUSPEND_WAIT_S = 0.5


class ProcessControl:
    """The processes of one session; a ``sandbox.shell.ladder.Target`` for its commands."""

    def __init__(self, link: ShellLink, recovery: ShellRecovery) -> None:
        self.link = link
        self.recovery = recovery
        self.oom_seen = False  # the kernel's OOM killer struck in the container
        self._oom_baseline = 0
        self._cpu_sample: tuple[float, float] | None = None
        self._started_mono = time.monotonic()

    # -- the ladder's target -------------------------------------------------------------
    def interrupt(self) -> None:
        with contextlib.suppress(SandboxError):
            self.link.require_alive().write(b"\x03")

    def foreground_pgid(self) -> int | None:
        pid = self.link.tracker.shell_pid
        if pid is None:
            return None
        result = self._run(["sh", "-c", f"p={int(pid)}\n{FOREGROUND_GROUP_SH}\necho $t"])
        if result.exit_code != 0 and not result.output.strip():
            raise SessionBusyError(
                f"cannot run a control command in session {self.link.id} (exit {result.exit_code})"
            )
        try:
            tpgid = int(result.output.strip() or b"0")
        except ValueError as exc:
            raise SessionBusyError(f"cannot read the foreground job: {result.output!r}") from exc
        return tpgid if tpgid > 0 and tpgid != pid else None

    def signal_group(self, pgid: int, signal: str) -> bool:
        number = SIGNAL_NUMBERS[signal]
        try:
            result = self._run(["kill", f"-{number}", "--", f"-{int(pgid)}"])
        except SandboxError:
            return False
        if result.exit_code != 0:
            log.info("kill -%s -%s: %s", signal, pgid, result.output.decode(errors="replace"))
        return result.exit_code == 0 or b"No such process" in result.output

    def wait_done(self, grace_s: float) -> bool:
        """Wait up to ``grace_s`` for the running command to end (or the shell)."""
        link = self.link
        deadline = time.monotonic() + grace_s
        with link.cond:
            while True:
                if not link.tracker.running or not link.alive:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                link.cond.wait(remaining)

    def resync(self) -> None:
        p = self.link.tracker.pending
        if p is not None and not p.finished:
            with contextlib.suppress(SandboxError):
                self.link.require_alive().write(resync_line(p.nonce, 130))

    def respawn(self) -> bool:
        return self.recovery.respawn()

    def reset(self) -> None:
        self.recovery.reset()

    # -- sweep, probe, signal ------------------------------------------------------------
    def sweep(self, after_pid: int | None, command: str | None = None) -> int:
        """Kill every process of the shell's user born after ``after_pid`` except the shell
        (None: every one but the shell), sparing those whose environment says another command
        than ``command`` (a nonce) started them. Returns how many were killed, -1 when the
        control command could not run (the pids limit is full: the caller resets the
        container)."""
        shell = self.link.tracker.shell_pid
        if shell is None or not self.link.backend.isolated:
            return 0  # a fake backend runs commands on the host: never sweep there
        script = sweep_script(
            keepalive_uid=KEEPALIVE_UID,
            after_pid=after_pid,
            shell_pid=shell,
            durable=self.link.spec.durable,
            nonce=command,
        )
        try:
            result = self._run(["bash", "-c", script])
        except SandboxError as exc:
            log.info("sweep of %s failed: %s", self.link.id, exc)
            return -1
        text = result.output.decode("utf-8", "replace")
        count = parse_sweep(text)
        if count == -2:
            log.warning("session %s: not a sandbox container, no sweep", self.link.id)
            return 0
        if count is None:
            exit_code = result.exit_code
            log.info("sweep of %s printed %r (exit %s)", self.link.id, text[-200:], exit_code)
            return -1
        if count:
            log.info("session %s: killed %d stray processes", self.link.id, count)
        return count

    def probe(self) -> ProbeResult | None:
        """One look inside: usage, the foreground job, the cwd (None: it could not run)."""
        pid = self.link.tracker.shell_pid
        if pid is None or not self.link.alive:
            return None
        try:
            result = self._run(["sh", "-c", probe_script(pid)])
        except SandboxError as exc:
            log.info("probe of %s failed: %s", self.link.id, exc)
            return None
        text = result.output.decode("utf-8", "replace")
        if result.exit_code != 0 and "pids " not in text:
            # the engine's answer when the exec could not start (Podman at a full pids limit)
            log.info("probe of %s did not start: %s", self.link.id, text.strip()[:200])
            return None
        return parse_probe(text, pid)

    def check_oom(self) -> bool:
        """Whether the OOM killer struck since the last look (a command's exit 137)."""
        probe = self.probe()
        if probe is None or probe.oom_kills is None:
            return False
        if probe.oom_kills > self._oom_baseline:
            self._oom_baseline = probe.oom_kills
            self.oom_seen = True
            return True
        return False

    def usage(self, probe: ProbeResult) -> Usage:
        """What the probe says the container uses; CPU since the last look."""
        cpu_percent = None
        now = time.monotonic()
        if probe.cpu_s is not None:
            prev = self._cpu_sample or (self._started_mono, 0.0)
            elapsed = now - prev[0]
            if elapsed > 0.05:
                cpu_percent = round(100 * (probe.cpu_s - prev[1]) / elapsed, 1)
            self._cpu_sample = (now, probe.cpu_s)
        if probe.oom_kills:
            self.oom_seen = True
        return Usage(
            memory_mb=probe.memory_mb,
            cpu_percent=cpu_percent,
            pids=probe.pids,
            pids_max=probe.pids_max,
        )

    def signal(self, sig: str = "INT", *, escalate_: bool = True) -> SignalResult:
        """The signal tool: send ``sig`` to the foreground job (climbing the ladder)."""
        self.link.require_alive()
        sig = sig.upper().removeprefix("SIG")
        if sig not in SIGNAL_NUMBERS:
            raise InvalidArgumentError(
                f"unknown signal {sig!r}", hint=f"One of {', '.join(SIGNAL_NUMBERS)}."
            )
        self.link.touch()
        before = self.probe()
        fg_before = before.foreground if before else None
        if before is None or before.foreground_pgid is None:
            return SignalResult(
                stopped=True, signals_sent=[], foreground_before=None, foreground_after=None
            )
        if escalate_ and sig in LADDER:
            job = JobTarget(self, before.foreground_pgid)
            esc = escalate(job, start=sig, grace_s=GRACE_S, use_tty=False, last_resort=False)
            sent, reset = esc.signals_sent, esc.reset
        else:
            ok = self.signal_group(before.foreground_pgid, sig)
            sent, reset = ([f"SIG{sig}"] if ok else []), False
            time.sleep(0.05)
        after = None if reset else self.probe()
        fg_after = after.foreground if after else None
        stopped = reset or after is None or after.foreground_pgid != before.foreground_pgid
        return SignalResult(
            stopped=stopped,
            signals_sent=sent,
            foreground_before=fg_before,
            foreground_after=fg_after,
            session_reset=reset,
        )

    # -- a program left waiting ----------------------------------------------------------
    def put_aside(self) -> str | None:
        """An earlier command still holds the terminal. When its program waits for input (a
        REPL, an editor, ``cat``), suspend it so this command can run, and say how to get it
        back; a shell builtin such as ``read`` is interrupted instead. A working program is
        left alone (the caller waits for it, then names it in SESSION_BUSY)."""
        link = self.link
        with link.cond:
            p = link.tracker.pending
            shell = link.tracker.shell_pid
            if p is None or p.finished or not link.alive or shell is None:
                return None
            quiet = time.monotonic() - link.last_output
        if not link.backend.isolated or link.spec.durable:
            return None
        if quiet < LEFTOVER_QUIET_S and not self.wait_done(LEFTOVER_QUIET_S - quiet):
            with link.cond:
                if time.monotonic() - link.last_output < LEFTOVER_QUIET_S:
                    return None  # it is printing: working
        try:
            result = self._run(["sh", "-c", foreground_script(shell)])
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
        before = link.log.size
        self.signal_group(fg.pgid, "TSTP")
        if not self.wait_done(SUSPEND_WAIT_S):
            self.signal_group(fg.pgid, "STOP")  # it ignores SIGTSTP
            self.wait_done(GRACE_S)
        job = re.search(rb"\[(\d+)\]\+\s+Stopped", link.log.read(before, link.log.size))
        n = job.group(1).decode() if job else "1"
        return (
            f"{fg.args!r}, left open by an earlier command, was waiting for input: it was "
            f"suspended (job %{n}) so this command could run. `fg %{n}` brings it back to the "
            f"foreground (then type into it with send), `bg %{n}` lets it run in the "
            f"background, `kill %{n}` ends it."
        )

    def _run(self, argv: list[str]) -> RunResult:
        return self.link.backend.run(self.link.container_id, argv, user=self.link.spec.user)
