"""When a session's reader reads, pauses, and whom it wakes: the pacing of its output.

Someone attends (an execute holds the session's turn, a read or a person's terminal watches):
the reader drains at full speed, and after a read of ``GATHER_FROM`` bytes or more lets the
stream gather ``GATHER_S`` (bulk output then costs ~10x fewer, bigger chunks). Nobody attends:
it reads ``UNATTENDED_READ_SIZE`` at a time and pauses between reads: briefly after a short one
(the next chunk gathers), and past a burst by the unattended budget (``ReadBudget``), ``YIELD``
times slower while someone waits on another session (``Waits``). A background execute's own
turn counts as nobody while someone waits elsewhere: it asked not to be waited for.

``attend`` ends a pause at once, and one that comes while a read is under way skips the pause
after it (its wake-up may be the very one the pause's clearing would erase). Output held back
by a pause is not a quiet program (``quiet_since``): the idle and input rules wait for it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from sandbox.session.read_budget import ReadBudget
from sandbox.session.waits import YIELD, Waits

READ_SIZE = 256 * 1024
# Unattended output is read in smaller pieces: each read's work (log, recording) holds the GIL
# that a waited-on session's reader and caller need, about 1 ms per 64 KiB.
UNATTENDED_READ_SIZE = 64 * 1024
UNATTENDED_PAUSE_S = 0.005
UNATTENDED_BURST = 1024 * 1024  # drained at full speed before the unattended rate applies
# Streaming output arrives from the engine in pieces of the pty's ~4 KiB reads; read at once,
# each piece costs a wakeup and the whole per-chunk path (log, recording, tracker, a waiter
# woken), which on bulk output made the reader cost as much CPU as the program. After a read
# this big, let the stream gather a moment: ~10x fewer, bigger chunks, at most this much later.
GATHER_FROM = 2048
GATHER_S = 0.001


class ReadPacing:
    """One session's pacing, shared by its reader thread and the callers that attend.

    The counters of ``watching`` and ``every_chunk`` change under the session's ``cond`` (their
    callers hold it); the rest are single writes read by the reader thread.
    """

    def __init__(self, *, rate: int, waits: Waits, turn: threading.Lock) -> None:
        self.waits = waits  # on any of the server's sessions
        self._rate = rate  # bytes/s drained while nobody attends (0: all)
        self._turn = turn  # the session's execute lock: held while an execute runs
        self._attention = threading.Event()  # set when someone starts to wait on output or types
        self._attended = 0  # counts ``attend`` calls: one during a read is not lost to a clear
        self._watchers = 0  # readers blocked in read()/wait_output()
        # waiters (holding ``cond``) that look at every chunk, not only at the tracker's events
        self._chunk_waiters = 0
        self.holding_back = False  # the reader pauses by the unattended budget: output waits
        self._held_until = 0.0  # when the reader last stopped holding output back
        self.background_turn = False  # the execute holding the turn asked not to be waited for

    # -- who attends ---------------------------------------------------------------------
    def attend(self) -> None:
        """Wake a reader that pauses between reads of unattended output: an answer is due."""
        self._attended += 1
        if not self._attention.is_set():  # set already: nobody pauses on it (and no lock)
            self._attention.set()

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Count the caller (holding the session's ``cond``) as waiting on output: the reader
        runs at full speed meanwhile, woken at once if it pauses."""
        self._watchers += 1
        self.attend()
        try:
            with self.waits.waiting():
                yield
        finally:
            self._watchers -= 1

    @contextlib.contextmanager
    def every_chunk(self) -> Iterator[None]:
        """Wake the caller (holding ``cond``) on every chunk of output, not only on the marker
        tracker's events (a streaming execute, one that watches for input)."""
        self._chunk_waiters += 1
        try:
            yield
        finally:
            self._chunk_waiters -= 1

    @property
    def wakes_on_every_chunk(self) -> bool:
        """Someone waits on output itself: every chunk must wake the session's waiters."""
        return self._watchers > 0 or self._chunk_waiters > 0

    def full_speed(self) -> bool:
        """Drain at full speed: someone attends (an execute, a read, a person's terminal),
        unless only a background execute does while someone waits on another session (then
        this one is paced as if unattended)."""
        if self._watchers > 0:
            return True
        return self._turn.locked() and not (self.background_turn and self.waits.any)

    def quiet_since(self, last_output: float) -> float:
        """Since when no output arrived: now while the reader holds output back (the program
        is not quiet, its output waits unread), else the later of the last chunk and the end
        of the last hold (its next read is on the way)."""
        if self.holding_back:
            return time.monotonic()
        return max(last_output, self._held_until)

    # -- the reader ----------------------------------------------------------------------
    def reads(self, current: Callable[[], bool]) -> Reads:
        """The pacing of one reader thread; ``current`` says whether it still serves a live
        session (a replaced, detached or destroyed one must not pause: its channel closes)."""
        return Reads(self, current, ReadBudget(self._rate, UNATTENDED_BURST))

    def mark(self) -> int:
        """Where the attends stand: taken before a read, handed to ``pause`` after it."""
        return self._attended

    def pause(self, seconds: float, *, held: bool, mark: int, current: Callable[[], bool]) -> None:
        """Pause the reader up to ``seconds``, unless someone attends, or attended since
        ``mark`` (typed input during the read: its wake-up may be the one cleared here), or
        the reader no longer serves a live session. ``held``: output waits unread meanwhile."""
        self._attention.clear()
        if self._attended != mark or self.full_speed() or not current():
            return
        self.holding_back = held
        self._attention.wait(seconds)
        if held:
            self._held_until = time.monotonic()
        self.holding_back = False


class Reads:
    """One reader thread's reads: ``size`` before each, ``done`` after it is processed."""

    def __init__(self, pacing: ReadPacing, current: Callable[[], bool], budget: ReadBudget) -> None:
        self._pacing = pacing
        self._current = current
        self._budget = budget
        self._size = READ_SIZE
        self._mark = 0

    def size(self) -> int:
        """How much the next read asks for (it follows at once)."""
        self._mark = self._pacing.mark()
        return self._size

    def done(self, n: int) -> None:
        """After a read of ``n`` bytes: gather, pause, or go on."""
        pacing, asked = self._pacing, self._size
        if pacing.full_speed():
            self._budget.refill()
            if GATHER_FROM <= n < asked:
                time.sleep(GATHER_S)
            self._size = READ_SIZE
            return
        # Nobody waits on this session: let output gather into fewer, bigger reads (a flood
        # then costs far fewer wakeups and less of the GIL that other sessions' round trips
        # need), and past a burst drain it at the budget's rate, or YIELD times slower while
        # someone waits on another session. An execute, a read or typed input ends the pause
        # at once (``attend``).
        owed = self._budget.spend(n * (YIELD if pacing.waits.any else 1))
        # output waits unread: the budget's pause, or a read that filled its buffer (a short
        # read's pause only lets the next chunk gather)
        held = owed > 0 or n == asked
        pause = owed if n == asked else max(owed, UNATTENDED_PAUSE_S)
        self._size = UNATTENDED_READ_SIZE
        if pause > 0:
            pacing.pause(pause, held=held, mark=self._mark, current=self._current)
