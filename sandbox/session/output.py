"""A command's output: its tail shaped for ``execute`` and its bytes streamed as they arrive."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from sandbox.shell.tracker import Pending
from sandbox.terminal.rawlog import RawLog
from sandbox.terminal.stream import clean_transcript

OutputFn = Callable[[bytes], None]


def shape_output(
    log: RawLog,
    start: int,
    end: int,
    newlines: int,
    max_lines: int,
    strip_ansi: bool,
    max_bytes: int,
) -> tuple[str, bool, int]:
    """A command's output from log bytes ``[start, end)``: (text, truncated, total_lines).

    At most ``max_bytes`` of the end are read and cleaned (so a 50 MB output costs 1 MB);
    ``newlines`` (counted by the reader) gives ``total_lines`` when the start was cut off."""
    if end <= start:  # printed nothing (``true``, ``cd``): what the rest makes of no bytes
        return "", False, 0
    cut = max(start, end - max_bytes)
    raw = log.read(cut, end)
    byte_cut = cut > start
    if byte_cut:
        nl = raw.find(b"\n")
        raw = raw[nl + 1 :] if nl >= 0 else b""
    text = clean_transcript(raw, strip_ansi=strip_ansi)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
        trailing = "\n"
    else:
        trailing = ""
    total = newlines + (0 if trailing else 1) if byte_cut else len(lines)
    truncated = byte_cut
    if max_lines >= 0 and len(lines) > max_lines:
        lines = lines[len(lines) - max_lines :] if max_lines else []
        truncated = True
    out = "\n".join(lines) + (trailing if lines else "")
    return out, truncated, total


class OutputStreamer:
    """Hands a running command's raw bytes to a callback as they arrive (markers held back)."""

    def __init__(self, log: RawLog, pending: Pending, fn: OutputFn) -> None:
        self._log = log
        self._p = pending
        self._fn = fn
        self._sent: int | None = None
        self._looked_at = -1

    def pending(self) -> bool:
        """New bytes arrived since the last flush (called with the session's lock held)."""
        return self._p.start is not None and self._log.size != self._looked_at

    def flush(self, *, final: bool = False) -> None:
        p = self._p
        self._looked_at = self._log.size
        if p.start is None:
            return
        begin = self._sent if self._sent is not None else p.start
        end = p.end if p.end is not None else self._log.size
        if end <= begin:
            return
        data = self._log.read(begin, end)
        if p.end is None and not final:
            # hold back what may be the beginning of the end marker
            esc = data.rfind(b"\x1b", max(0, len(data) - 96))
            if esc >= 0:
                data = data[:esc]
        if not data:
            return
        self._sent = begin + len(data)
        with contextlib.suppress(Exception):
            self._fn(data)
