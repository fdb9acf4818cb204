"""Which servers are alive, told by lock files in the state directory.

Each server holds ``servers/<instance id>.lock`` while it runs (another server that can lock
it knows the first is gone, and may collect its containers); one server at a time holds its
owner's lock and with it that owner's durable sessions.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from pathlib import Path
from typing import IO


class ServerLocks:
    """This server's lock files; ``alive`` reads another server's."""

    def __init__(self, servers_dir: Path, instance_id: str, owner: str) -> None:
        self.servers_dir = servers_dir
        self.instance_id = instance_id
        self._owner = owner
        self._server: IO[str] | None = None
        self._owner_lock: IO[str] | None = None

    def take_server_lock(self) -> None:
        self.servers_dir.mkdir(parents=True, exist_ok=True)
        handle = self._path(self.instance_id).open("w")
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._server = handle

    def alive(self, instance_id: str) -> bool | None:
        """True/False for servers that use our state dir; None when we cannot know."""
        if instance_id == self.instance_id:
            return True
        path = self._path(instance_id)
        if not path.exists():
            return None
        with path.open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
        return False

    def forget(self, instance_id: str) -> None:
        """Remove a gone server's lock file."""
        with contextlib.suppress(OSError):
            self._path(instance_id).unlink()

    def take_owner_lock(self) -> bool:
        """One server at a time adopts an owner's durable sessions."""
        if self._owner_lock is not None:
            return True
        digest = hashlib.sha256(self._owner.encode()).hexdigest()[:16]
        handle = (self.servers_dir / f"owner-{digest}.lock").open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        self._owner_lock = handle
        return True

    def release(self) -> None:
        """Let go of both locks (the server stops); idempotent."""
        if self._owner_lock is not None:
            self._owner_lock.close()
            self._owner_lock = None
        if self._server is not None:
            self._server.close()
            self.forget(self.instance_id)
            self._server = None

    def _path(self, instance_id: str) -> Path:
        return self.servers_dir / f"{instance_id}.lock"
