"""Who waits on a session right now, across a server: their sessions come before floods.

A ``Waits`` is shared by one server's sessions. An execute that waits for its command's end,
and a read that waits for output, count as a wait while they last (a background execute does
not: it asked not to be waited for). A session nobody attends is drained at its unattended
budget (``sandbox.session.read_budget``); while someone waits on another session, its reader
takes ``YIELD`` times less, so ten floods nobody reads cost the relay (dockerd, the shims, the
pty) and this server's reader threads little of the CPU that the waited-on round trip needs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

YIELD = 8  # an unattended session drains this many times slower while another is waited on


class Waits:
    """A count of the waits in progress; thread-safe, never held while taking another lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        with self._lock:
            self._count += 1
        try:
            yield
        finally:
            with self._lock:
                self._count -= 1

    @property
    def any(self) -> bool:
        """Someone waits on some session now."""
        return self._count > 0
