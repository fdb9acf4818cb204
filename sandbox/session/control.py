"""Looking into and stopping what runs in a session: signal, the escalation target, info."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time

from sandbox.config import KEEPALIVE_UID
from sandbox.errors import InvalidArgumentError, SandboxError, SessionBusyError
from sandbox.models import Cursor, SessionCreated, SessionInfo, SessionSummary, SignalResult, Usage
from sandbox.session.profile import project_access
from sandbox.session.state import SessionState
from sandbox.shell.ladder import LADDER, SIGNAL_NUMBERS, JobTarget, escalate
from sandbox.shell.markers import resync_line
from sandbox.shell.probe import FOREGROUND_GROUP_SH, ProbeResult, parse_probe, probe_script
from sandbox.terminal.stream import ScreenSnapshot

log = logging.getLogger(__name__)

GRACE_S = 1.0
SWEEP_ROUNDS = 4

# Kills, as the shell's user, every process born after pid @AFTER@ (the start marker's
# ``ns_last_pid``) except the shell and this script: what a timed-out command left behind outside
# its process group (``setsid``, ``nohup``, double forks). Pids only grow in a pid namespace until
# they wrap at pid_max: after a wrap (or with no start pid: @AFTER@ = -1) every process of the
# user goes, as it does when the container is at 90% of its pids limit (a fork bomb an earlier
# command left behind makes the session unusable anyway). Each round stops the processes first
# so a forking loop cannot outrun the kill. A process whose environment names another command
# (``SANDBOX_COMMAND``, exported by the start marker's function) is spared unless the pids limit
# is that full: a daemon an earlier command started can fork after this command began (``setsid``
# does, once more, when it leads its process group), and its pid alone would condemn it.
# Only builtins: it must work when the pids limit leaves no room for a fork. Prints the number
# of processes killed. It refuses to run ("swept -2") unless PID 1 is the session container's
# init, which runs as the keepalive's uid: never on a host (PID 1 is root's there), whatever
# backend asked.
SWEEP_SCRIPT = r"""
p1=; while read -r k v _; do [ "$k" = Uid: ] && { p1=$v; break; }; done </proc/1/status
[ "$p1" = @KEEPALIVE@ ] || { echo "swept -2"; exit 0; }
after=@AFTER@; shell=@SHELL@; self=$$; skip_tmux=@DURABLE@; nonce=@NONCE@; full=0
last=0; read -r last </proc/sys/kernel/ns_last_pid 2>/dev/null
[ "$after" -ge 0 ] && [ "$last" -ge "$after" ] 2>/dev/null || after=-1
for c in /sys/fs/cgroup/pids /sys/fs/cgroup; do
  cur=; max=; read -r cur <$c/pids.current 2>/dev/null; read -r max <$c/pids.max 2>/dev/null
  if [ -n "$cur" ] && [ "$max" -gt 0 ] 2>/dev/null; then
    [ $((cur * 10)) -ge $((max * 9)) ] && { after=-1; full=1; }
    break
  fi
done
killed=0; round=0
while [ $round -lt @ROUNDS@ ]; do
  round=$((round + 1)); victims=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$self" ] || [ "$p" = "$shell" ] || [ "$p" -le "$after" ] && continue
    [ -O "$d" ] || continue
    read -r st <"$d/stat" 2>/dev/null || continue
    rest=${st##*) }; set -- $rest
    case "$1" in Z|X|x) continue ;; esac
    [ "$2" = "$self" ] && continue
    if [ "$skip_tmux" = 1 ]; then
      case "${st#*(}" in tmux*|tail*) continue ;; esac
    fi
    if [ "$full" = 0 ] && [ -n "$nonce" ]; then
      tag=
      while IFS= read -r -d '' kv; do
        case "$kv" in SANDBOX_COMMAND=*) tag=${kv#SANDBOX_COMMAND=}; break ;; esac
      done <"$d/environ" 2>/dev/null
      [ -n "$tag" ] && [ "$tag" != "$nonce" ] && continue
    fi
    victims="$victims $p"
  done
  [ -z "$victims" ] && break
  kill -STOP $victims 2>/dev/null; kill -KILL $victims 2>/dev/null
  set -- $victims; killed=$((killed + $#))
done
echo "swept $killed"
"""


class ControlMixin(SessionState):
    """signal, info and the ``sandbox.shell.ladder.Target`` methods for ``Session``."""

    shell_restarts: int

    def _snapshot(self) -> ScreenSnapshot:
        raise NotImplementedError

    def interrupt(self) -> None:
        with contextlib.suppress(SandboxError):
            self._require_alive().write(b"\x03")

    def foreground_pgid(self) -> int | None:
        pid = self._shell_pid
        if pid is None:
            return None
        result = self.backend.run(
            self.container_id,
            ["sh", "-c", f"p={int(pid)}\n{FOREGROUND_GROUP_SH}\necho $t"],
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

    def sweep(self, after_pid: int | None, command: str | None = None) -> int:
        """Kill every process of the shell's user born after ``after_pid`` except the shell
        (None: every one but the shell), sparing those whose environment says another command
        than ``command`` (a nonce) started them. Returns how many were killed, -1 when the
        control command could not run (the pids limit is full: the caller resets the
        container)."""
        shell = self._shell_pid
        if shell is None:
            return 0
        if not self._in_container():
            return 0  # a fake backend runs commands on the host: never sweep there
        script = (
            SWEEP_SCRIPT.replace("@KEEPALIVE@", str(KEEPALIVE_UID))
            .replace("@AFTER@", str(-1 if after_pid is None else int(after_pid)))
            .replace("@SHELL@", str(int(shell)))
            .replace("@DURABLE@", "1" if self.spec.durable else "0")
            .replace("@ROUNDS@", str(SWEEP_ROUNDS))
            .replace("@NONCE@", command if command and command.isalnum() else "")
        )
        try:
            result = self.backend.run(
                self.container_id, ["bash", "-c", script], user=self.spec.user
            )
        except SandboxError as exc:
            log.info("sweep of %s failed: %s", self.id, exc)
            return -1
        text = result.output.decode("utf-8", "replace")
        for line in text.splitlines():
            if line.startswith("swept "):
                with contextlib.suppress(ValueError):
                    count = int(line.split()[1])
                    if count == -2:
                        log.warning("session %s: not a sandbox container, no sweep", self.id)
                        return 0
                    if count:
                        log.info("session %s: killed %d stray processes", self.id, count)
                    return count
        log.info("sweep of %s printed %r (exit %s)", self.id, text[-200:], result.exit_code)
        return -1

    def _in_container(self) -> bool:
        """Whether control commands run in a real container (not a fake backend's host)."""
        return self.backend.isolated

    def respawn(self) -> bool:
        """Replace a shell that no longer answers with a fresh one in the same container."""
        raise NotImplementedError

    def wait_ended(self, timeout_s: float) -> bool:
        """Wait until the shell (or the session's command) has ended; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._alive, timeout_s)

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
        if escalate_ and sig in LADDER:
            job = JobTarget(self, before.foreground_pgid)
            esc = escalate(job, start=sig, grace_s=GRACE_S, use_tty=False, last_resort=False)
            sent, reset = esc.signals_sent, esc.reset
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
        text = result.output.decode("utf-8", "replace")
        if result.exit_code != 0 and "pids " not in text:
            # the engine's answer when the exec could not start (Podman at a full pids limit)
            log.info("probe of %s did not start: %s", self.id, text.strip()[:200])
            return None
        return parse_probe(text, pid)

    def _check_oom(self) -> bool:
        probe = self._probe()
        if probe is None or probe.oom_kills is None:
            return False
        if probe.oom_kills > self._oom_baseline:
            self._oom_baseline = probe.oom_kills
            self._oom_seen = True
            return True
        return False

    @property
    def busy(self) -> bool:
        with self._cond:
            p = self._pending
            return (p is not None and not p.finished and self._alive) or self._exec_lock.locked()

    @property
    def shell_alive(self) -> bool:
        """Whether the shell (or the session's command) runs now; a person's terminal on it
        ends when it does, even where the next execute would start a fresh shell."""
        return self._alive and not self._destroyed

    @property
    def status(self) -> str:
        """ "running" also when the login shell ended but its container runs: the next execute
        starts a fresh shell there (the session and its processes are still usable)."""
        if self._destroyed:
            return "exited"
        return "running" if self._alive or self._revivable else "exited"

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
            runtime=s.runtime,
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
            usage = Usage(
                memory_mb=probe.memory_mb,
                cpu_percent=cpu_percent,
                pids=probe.pids,
                pids_max=probe.pids_max,
            )
            if probe.oom_kills:
                self._oom_seen = True
        oom = self._oom_seen
        with contextlib.suppress(SandboxError):
            oom = oom or self.backend.inspect(self.container_id).oom_killed
        created = self.created()
        if probe is None and self._alive:
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
            shell_restarts=self.shell_restarts,
        )
