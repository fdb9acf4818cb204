"""How fast a session's output is drained while nobody waits on it.

A session that prints as fast as it can (``yes``, ``cat /dev/urandom | base64``) with no
execute, read or person waiting on it gains nothing from being drained at full speed: every
byte costs the engine's relay (dockerd, containerd-shim, the kernel's pty work) and this
server's reader CPU that other sessions' round trips need. A token bucket lets short bursts
through at full speed and then drains at ``rate`` bytes per second; what the reader does not
take waits in the socket, the pipe and the pty, and the program blocks on its write, exactly as
behind a slow terminal. Nothing is lost, and the moment someone attends, the reader runs at
full speed again (``ReadPacing.attend``, ``sandbox.session.read_pacing``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], float]


class ReadBudget:
    """A token bucket of bytes: ``spend`` says how long to pause after a read.

    ``clock`` (seconds, monotonic) is injectable so the bucket can be tested without waiting."""

    def __init__(self, rate: float, burst: float, *, clock: Clock = time.monotonic) -> None:
        self.rate = rate  # bytes per second; 0 = unlimited
        self.burst = burst
        self._clock = clock
        self._tokens = burst
        self._at = clock()

    def spend(self, n: int) -> float:
        """Account ``n`` bytes read while unattended; seconds to pause before the next read."""
        if self.rate <= 0:
            return 0.0
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate) - n
        self._at = now
        return -self._tokens / self.rate if self._tokens < 0 else 0.0

    def refill(self) -> None:
        """Someone attends: the next unattended stretch starts with a full burst."""
        self._tokens = self.burst
        self._at = self._clock()
