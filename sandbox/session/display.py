"""What a session's terminal shows: the lazy screen, the commands as people typed them (not
our protocol lines), and where the next "new" read starts.

The reader thread calls ``scan`` on every chunk (cheap: a regex over the chunk); the screen is
brought up to date only when someone looks (``snapshot``, a cursor query). ``_lock`` guards the
echoes and the read cursor and is never held while taking another lock.
"""

from __future__ import annotations

import collections
import threading

from sandbox.terminal.rawlog import RawLog
from sandbox.terminal.stream import LazyScreen, ScreenSnapshot, StreamScanner


class Display:
    """The terminal one session draws, read from its raw log."""

    def __init__(self, log: RawLog, rows: int, cols: int) -> None:
        self.log = log
        self.rows, self.cols = rows, cols
        self.scanner = StreamScanner()
        self._screen = LazyScreen(rows, cols)
        self._screen_lock = threading.Lock()
        self._lock = threading.Lock()
        # (start, end, replacement): where the screen shows the command instead of our line
        self._echoes: collections.deque[tuple[int, int, bytes]] = collections.deque(maxlen=256)
        self._read_offset = log.size
        self._skip_prompt_at: int | None = None

    def scan(self, data: bytes, offset: int) -> list[str]:
        """Note the modes and restart points in ``data``; return the terminal queries in it."""
        return self.scanner.scan(data, offset).queries

    def add_echo(self, start: int, end: int, shown: bytes) -> None:
        """Show ``shown`` instead of the log's bytes ``[start, end)`` (a protocol line)."""
        with self._lock:
            self._echoes.append((start, end, shown))

    def echo_ranges(self) -> list[tuple[int, int]]:
        """The log ranges shown as something else (a page of the live view never ends inside
        one: ``sandbox.session.live_view``)."""
        with self._lock:
            return [(start, end) for start, end, _ in self._echoes]

    # -- the "new" cursor ----------------------------------------------------------------
    def on_prompt(self, end: int) -> None:
        """A prompt ending at ``end`` was drawn: a read cursor waiting for it skips it."""
        with self._lock:
            if self._skip_prompt_at is not None:
                if self._read_offset == self._skip_prompt_at:
                    self._read_offset = end
                self._skip_prompt_at = None

    def command_typed(self) -> None:
        with self._lock:
            self._skip_prompt_at = None

    def command_done(self, after: int | None, prompt_end: int | None) -> None:
        """A command's execute returned: "new" reads start after its prompt (or skip that
        prompt once it comes); ``after`` None: it did not finish, read from the log's end."""
        with self._lock:
            if after is None:
                self._read_offset = self.log.size
            elif prompt_end is not None:
                self._read_offset = prompt_end
            else:
                self._read_offset = after
                self._skip_prompt_at = after

    def new_since(self, end: int, *, consume: bool) -> int:
        """Where the "new" view starts; with ``consume`` it moves to ``end``."""
        with self._lock:
            start = self._read_offset
            if consume:
                self._read_offset = end
            return start

    # -- the screen ----------------------------------------------------------------------
    def display_read(self, start: int, stop: int) -> bytes:
        """Log bytes for the views people look at (screen, scrollback): each command's
        protocol line (``__sb_s NONCE; eval $'...'``) is shown as the command itself."""
        data = self.log.read(start, stop)
        with self._lock:
            echoes = [e for e in self._echoes if e[0] < stop and e[1] > start]
        if not echoes:
            return data
        out: list[bytes] = []
        pos = start
        for a, b, shown in echoes:
            if a >= pos:
                out.append(data[pos - start : a - start])
                if b <= stop:
                    out.append(shown)
            pos = min(max(pos, b), stop)
        out.append(data[pos - start :])
        return b"".join(out)

    def snapshot(self) -> ScreenSnapshot:
        with self._screen_lock:
            self._screen.catch_up(self.log.size, self.display_read, self.scanner)
            return self._screen.snapshot()

    def cursor_report(self) -> bytes:
        with self._screen_lock:
            self._screen.catch_up(self.log.size, self.display_read, self.scanner)
            return self._screen.cursor_report()

    def resize(self, rows: int, cols: int) -> None:
        with self._screen_lock:
            self._screen.resize(rows, cols)
        self.rows, self.cols = rows, cols
