"""The raw log: every byte a session's terminal produced, append-only, addressed by offset.

Raw bytes are the truth; every view (execute output, "new", scrollback, screen, read_log) is
computed from ranges of this log. The file lives in the state directory; a bounded in-memory
tail serves the common small reads without a syscall. Past ``max_bytes`` the file stops growing
(offsets keep counting, a notice marks the cut, and recent bytes stay readable from the tail),
so a flood can never fill the disk.
"""

from __future__ import annotations

import collections
import os
import threading
from pathlib import Path

DROPPED_NOTICE = b"\r\n[sandbox: log limit reached; further output was not kept]\r\n"


class RawLog:
    """Append-only byte log of one session. ``append`` is called by the reader thread only."""

    def __init__(self, path: Path, *, max_bytes: int, tail_bytes: int = 256 * 1024) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        self._fd = os.open(path, flags, 0o600)
        self._size = os.fstat(self._fd).st_size  # a reopened log continues at its end
        self._stored = self._size  # bytes actually in the file
        self._max = max_bytes
        self._capped = self._stored >= max_bytes
        self._tail: collections.deque[bytes] = collections.deque()
        self._tail_bytes = 0
        self._tail_start = self._size
        self._tail_limit = tail_bytes
        self._lock = threading.Lock()
        self._closed = False

    @property
    def size(self) -> int:
        """Total bytes the terminal produced (the next byte's offset)."""
        return self._size

    @property
    def max_bytes(self) -> int:
        return self._max

    @property
    def stored(self) -> int:
        """Bytes actually kept in the file (== size unless the cap was reached)."""
        return self._stored

    def append(self, data: bytes) -> int:
        """Append ``data``; return the offset it starts at."""
        with self._lock:
            start = self._size
            if not self._closed and not self._capped:
                room = self._max - self._stored
                keep = data
                if len(data) > room:
                    keep = data[: max(0, room)] + DROPPED_NOTICE
                    self._capped = True
                try:
                    os.write(self._fd, keep)
                    self._stored += len(keep)
                except OSError:  # disk full: keep serving what is stored
                    self._capped = True
            self._size += len(data)
            self._tail.append(data)
            self._tail_bytes += len(data)
            while self._tail_bytes - len(self._tail[0]) >= self._tail_limit:
                old = self._tail.popleft()
                self._tail_bytes -= len(old)
                self._tail_start += len(old)
            return start

    def read(self, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` (clamped to what exists)."""
        with self._lock:
            start = max(0, start)
            stop = min(stop, self._size)
            if stop <= start:
                return b""
            if start >= self._stored:  # the file stopped at its cap: serve what the tail has
                start = max(start, self._tail_start)
            if stop <= start:
                return b""
            if start >= self._tail_start:
                return self._from_tail(start, stop)
            if self._closed:
                return b""
            stop = min(stop, self._stored)
            if stop <= start:
                return b""
            return os.pread(self._fd, stop - start, start)

    def _from_tail(self, start: int, stop: int) -> bytes:
        """Bytes [start, stop) from the in-memory tail, copying only the chunks they touch
        (execute reads a command's few bytes here: never the whole tail)."""
        parts: list[bytes] = []
        pos = self._size
        for chunk in reversed(self._tail):  # recent bytes are what is read most
            chunk_start = pos - len(chunk)
            if chunk_start < stop and pos > start:
                parts.append(
                    chunk[max(0, start - chunk_start) : min(len(chunk), stop - chunk_start)]
                )
            if chunk_start <= start:
                break
            pos = chunk_start
        parts.reverse()
        return b"".join(parts)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                os.close(self._fd)
