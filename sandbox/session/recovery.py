"""How a session recovers: a shell that lost its protocol or was killed is replaced, and a
container a runaway job has made unusable is restarted (the escalation ladder's last rungs).
"""

from __future__ import annotations

import contextlib
import logging

from sandbox.errors import SandboxError
from sandbox.session.shell_link import ShellLink
from sandbox.shell.tracker import Pending

log = logging.getLogger(__name__)

RESET_NOTICE = b"\r\n[sandbox: the container was reset to stop a runaway job]\r\n"
RESPAWN_NOTICE = (
    b"\r\n[sandbox: the shell stopped answering and was replaced by a fresh one; "
    b"its directory, variables and functions are back to their defaults]\r\n"
)


class ShellRecovery:
    """respawn, revive and reset of one session's shell, and how often each happened."""

    def __init__(self, link: ShellLink) -> None:
        self.link = link
        self.resets = 0
        self.shell_restarts = 0
        self.revived_notice = ""  # what the last revived shell lost, for the agent

    def respawn(self) -> bool:
        """Kill a shell that no longer answers and open a fresh one in the same container.

        The container, the project and other processes stay; the shell's state (directory,
        variables, functions) is back to the defaults. Not for durable sessions (their shell
        lives in tmux) or sessions that run a command instead of a shell."""
        link = self.link
        if link.spec.durable or link.destroyed or not link.is_shell:
            return False
        old_pid = link.tracker.shell_pid
        log.warning("session %s: the shell stopped answering, starting a fresh one", link.id)
        with link.cond:
            old = link.replace()
            link.alive = False
            p = link.tracker.pending
            if p is not None and p.end is None:
                self._close_lost(p)
            link.cond.notify_all()
        if old_pid is not None:
            with contextlib.suppress(SandboxError):
                link.backend.run(
                    link.container_id, ["kill", "-9", str(old_pid)], user=link.spec.user
                )
        if old is not None:
            old.close()
        link.pacing.attend()  # the old reader may be paused: let it see its channel closed
        return self._reopen()

    def _close_lost(self, p: Pending) -> None:
        """End command ``p`` whose markers never came: its output is what follows the echo of
        the typed line, up to the prompt the shell drew after it (exit code unknown)."""
        log_ = self.link.log
        size = log_.size
        if p.start is None:
            echoed = log_.read(p.sent_offset, min(size, p.sent_offset + 65536)).find(b"\n")
            p.start = p.sent_offset + echoed + 1 if echoed >= 0 else size
        end = size
        lost_prompt = self.link.tracker.lost_prompt
        if lost_prompt is not None and lost_prompt >= p.start:
            before = log_.read(p.start, lost_prompt)
            title = before.rfind(b"\x1b]0;sandbox:")
            end = p.start + title if title >= 0 else lost_prompt
        p.end = p.after = end

    def _reopen(self) -> bool:
        self.link.log.append(RESPAWN_NOTICE)
        try:
            self.link.open_shell()
        except SandboxError as exc:
            log.warning("session %s: no new shell (%s)", self.link.id, exc.message)
            return False
        self.shell_restarts += 1
        return True

    def revive_if_lost(self, *, after_exit: bool = True) -> bool:
        """Replace a login shell that ended: killed (``kill -9 $$``) or, unless not
        ``after_exit``, ended by the agent's own command (``exit``, ``set -e``, ``exec``).
        A durable session's shell, a session's own ``command``, or a destroyed session stay
        ended; so does a session whose container is gone. The container, the project and every
        other process stay; :attr:`revived_notice` says what the new shell lost."""
        link = self.link
        with link.cond:
            exit_marker = link.tracker.exit_marker
            if (
                link.alive
                or link.destroyed
                or link.spec.durable
                or not link.is_shell
                or (exit_marker is not None and not after_exit)
                or not link.attached
            ):
                return False
            exited = exit_marker is not None
            code = link.exit_code
        try:
            state = link.backend.inspect(link.container_id)
        except SandboxError:
            return False
        if state.status != "running":
            with link.cond:
                link.revivable = False
            return False  # killed or paused from outside: the session is over
        how = f"exited with code {code}" if exited else "was killed"
        log.warning("session %s: the shell %s, starting a fresh one", link.id, how)
        self.revived_notice = (
            f"The session's shell had {how} (`exit`, `set -e`, `exec` or a signal ends it); "
            "this command ran in a fresh shell in the same container: the directory is back "
            f"to {link.spec.workdir} and variables, functions and aliases to their defaults; "
            "background processes and files are as they were."
        )
        return self._reopen() or self._reset_if_running()

    def _reset_if_running(self) -> bool:
        """Not even a new shell lives (its memory is full of tmpfs pages, say): start afresh,
        unless the container was killed from outside after all (the session is over)."""
        link = self.link
        try:  # the shell's stream can end before the engine reports a killed container
            if link.backend.inspect(link.container_id).status != "running":
                return False
        except SandboxError:
            return False
        try:
            self.reset()
        except SandboxError as exc:
            log.warning("session %s: reset failed: %s", link.id, exc.message)
            return False
        return True

    def reset(self) -> None:
        """Kill the container, start it again and open a new shell (a fork bomb's last resort)."""
        link = self.link
        log.warning("session %s: resetting its container", link.id)
        with link.cond:
            old = link.replace()
            p = link.tracker.pending
            if p is not None and p.end is None:
                p.end = p.after = link.log.size
                p.exit_code = 137
                if p.start is None:
                    p.start = p.end
        if old is not None:
            old.close()
        link.pacing.attend()  # the old reader may be paused: let it see its channel closed
        link.backend.restart(link.container_id)
        self.resets += 1
        if not link.spec.durable:  # a durable log mirrors the container's file: add nothing
            link.log.append(RESET_NOTICE)
        link.open_shell()
