"""How a session recovers: a shell that lost its protocol or was killed is replaced, and a
container a runaway job has made unusable is restarted (the escalation ladder's last rungs).

A mixin of ``Session``; ``respawn`` and ``reset`` are also the ``sandbox.shell.ladder.Target``
methods the ladder calls.
"""

from __future__ import annotations

import contextlib
import logging

from sandbox.errors import SandboxError
from sandbox.session.control import GRACE_S, ControlMixin
from sandbox.session.state import Pending

log = logging.getLogger(__name__)

RESET_NOTICE = b"\r\n[sandbox: the container was reset to stop a runaway job]\r\n"
RESPAWN_NOTICE = (
    b"\r\n[sandbox: the shell stopped answering and was replaced by a fresh one; "
    b"its directory, variables and functions are back to their defaults]\r\n"
)


class RecoveryMixin(ControlMixin):
    """respawn, revive and reset for ``Session``."""

    revived_notice = ""

    def open_shell(self, *, adopt: bool = False) -> None:
        """Attach a TTY exec and wait until it answers (see ``Session``)."""
        raise NotImplementedError

    @property
    def is_shell(self) -> bool:
        return self.spec.command is None

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
        self._attend()  # the old reader may be paused: let it see its channel closed
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

    def _revive_if_lost(self, *, after_exit: bool = True) -> bool:
        """Replace a login shell that ended: killed (``kill -9 $$``) or, unless not
        ``after_exit``, ended by the agent's own command (``exit``, ``set -e``, ``exec``).
        A durable session's shell, a session's own ``command``, or a destroyed session stay
        ended; so does a session whose container is gone. The container, the project and every
        other process stay; :attr:`revived_notice` says what the new shell lost."""
        with self._cond:
            if (
                self._alive
                or self._destroyed
                or self.spec.durable
                or not self.is_shell
                or (self._exit_marker is not None and not after_exit)
                or self._channel is None
            ):
                return False
            exited = self._exit_marker is not None
            code = self._exit_code
        try:
            state = self.backend.inspect(self.container_id)
        except SandboxError:
            return False
        if state.status != "running":
            with self._cond:
                self._revivable = False
            return False  # killed or paused from outside: the session is over
        how = f"exited with code {code}" if exited else "was killed"
        log.warning("session %s: the shell %s, starting a fresh one", self.id, how)
        self.revived_notice = (
            f"The session's shell had {how} (`exit`, `set -e`, `exec` or a signal ends it); "
            "this command ran in a fresh shell in the same container: the directory is back "
            f"to {self.spec.workdir} and variables, functions and aliases to their defaults; "
            "background processes and files are as they were."
        )
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
        self._attend()  # the old reader may be paused: let it see its channel closed
        self.backend.restart(self.container_id)
        self.resets += 1
        if not self.spec.durable:  # a durable log mirrors the container's file: add nothing
            self.log.append(RESET_NOTICE)
        self.open_shell()
