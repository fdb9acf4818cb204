"""What the CLI prints: terminal bytes made safe for a local terminal, or plain text for a pipe.

Two streaming filters sit between a session's raw TTY bytes and the CLI's stdout:

- ``TerminalFilter`` (stdout is a terminal): bytes pass through unchanged (colours, cursor
  movement, progress bars) except our private ``ESC ]777;sb;...`` markers and, when the
  session already answers them, terminal queries (cursor position, device attributes): a
  local terminal would otherwise answer too, and its reply would arrive as typed input.
- ``PipeCleaner`` (stdout is a pipe or a file): plain text, escape sequences removed, lines
  written as soon as they are complete. A partial line is written at once unless it holds a
  ``\\r`` or backspace (a progress bar): that line is held until its newline and written as
  its final state, so a CI log gets ``100%`` rather than every redraw.

Both hold back only an escape sequence or UTF-8 character cut by the chunk boundary.
``RawTerminal`` puts a local tty into raw mode and restores it; ``terminal_size`` and
``format_age`` / ``format_table`` are small helpers for human output.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import termios
import tty
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, NoReturn

from sandbox.shell.markers import MARKER_PREFIX
from sandbox.terminal.transcript import clean_transcript, complete_prefix, sanitize_terminal

__all__ = [
    "PipeCleaner",
    "RawTerminal",
    "TerminalFilter",
    "format_age",
    "format_table",
    "readable_commands",
    "silence_stdout",
    "terminal_size",
]

_MARKER = re.escape(MARKER_PREFIX) + rb"[^\x07\x1b]{0,96}(?:\x07|\x1b\\)"
_QUERY = rb"\x1b\[(?:\??6n|0?c|>0?c)"
_MARKERS_ONLY = re.compile(_MARKER)
_MARKERS_AND_QUERIES = re.compile(_MARKER + b"|" + _QUERY)
_PARTIAL_CSI = re.compile(rb"\x1b(?:\[[0-9;?>]*)?")
_HOLD_LIMIT = 128


class TerminalFilter:
    """Raw terminal bytes for a local terminal, minus our markers (and queries if asked)."""

    def __init__(
        self,
        write: Callable[[bytes], None],
        *,
        drop_queries: bool = True,
        sanitize: bool = False,
    ) -> None:
        """``sanitize``: also keep only sequences that draw (a replayed log must not write the
        reader's clipboard or title: ``sandbox.terminal.transcript.sanitize_terminal``)."""
        self._write = write
        self._pattern = _MARKERS_AND_QUERIES if drop_queries else _MARKERS_ONLY
        self._sanitize = sanitize
        self._held = b""

    def feed(self, data: bytes) -> None:
        data = self._held + data
        self._held = b""
        cut = _incomplete_tail(data)
        if cut < len(data):
            data, self._held = data[:cut], data[cut:]
        if b"\x1b" in data:
            data = self._pattern.sub(b"", data)
        if self._sanitize:
            data = sanitize_terminal(data)
        if data:
            self._write(data)

    def finish(self) -> None:
        held, self._held = self._held, b""
        if held:
            held = self._pattern.sub(b"", held)
            self._write(sanitize_terminal(held) if self._sanitize else held)


def _incomplete_tail(data: bytes) -> int:
    """Where a trailing, possibly unfinished marker or query starts (``len(data)`` if none)."""
    esc = data.rfind(b"\x1b", max(0, len(data) - _HOLD_LIMIT))
    if esc < 0:
        return len(data)
    tail = data[esc:]
    if tail.startswith(MARKER_PREFIX):
        return len(data) if b"\x07" in tail or b"\x1b" in tail[1:] else esc
    if MARKER_PREFIX.startswith(tail) or _PARTIAL_CSI.fullmatch(tail):
        return esc
    return len(data)


_TYPED_COMMAND = re.compile(rb" ?__sb_s [0-9a-f]{1,32}; eval \$'((?:[^'\\]|\\.)*)'; __sb_e \$\?")
_TYPED_RESYNC = re.compile(rb" ?__sb_n=[0-9a-f]{1,32}; __sb_e [0-9]{1,3}")
_ANSI_C_ESCAPE = re.compile(rb"\\(x[0-9a-fA-F]{2}|.)", re.DOTALL)


def readable_commands(data: bytes) -> bytes:
    """Show the lines ``execute`` typed as the commands they ran (for people reading a log).

    ``__sb_s N; eval $'echo hi'; __sb_e $?`` becomes ``echo hi``; a resync line goes.
    An echo that the terminal wrapped or redrew is left as it is.
    """
    if b"__sb_" not in data:
        return data
    data = _TYPED_COMMAND.sub(lambda m: _unquote(m.group(1)).replace(b"\n", b"\r\n"), data)
    return _TYPED_RESYNC.sub(b"", data)


def _unquote(quoted: bytes) -> bytes:
    def one(match: re.Match[bytes]) -> bytes:
        esc = match.group(1)
        return bytes([int(esc[1:], 16)]) if len(esc) == 3 else esc

    return _ANSI_C_ESCAPE.sub(one, quoted)


class PipeCleaner:
    """Terminal bytes -> plain text, streamed line by line (see the module docstring)."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self._write = write
        self._tail = b""  # an escape sequence or character cut by the chunk boundary
        self._line = b""  # the unwritten part of the current line
        self._line_shown = False  # part of the current line was already written

    def feed(self, data: bytes) -> None:
        buf = self._tail + data
        n = complete_prefix(buf)
        self._tail = buf[n:]
        line = self._line + buf[:n]
        newline = line.rfind(b"\n")
        if newline >= 0:
            self._emit_lines(line[: newline + 1])
            line = line[newline + 1 :]
        body, cr = (line[:-1], b"\r") if line.endswith(b"\r") else (line, b"")
        if b"\r" in body or b"\b" in body:
            self._line = line  # a redrawn line: wait for its final state
            return
        text = clean_transcript(body) if body else ""
        if text:
            self._write(text)
            self._line_shown = True
        self._line = cr

    def finish(self) -> None:
        rest = self._line + self._tail
        self._line = self._tail = b""
        if rest:
            self._emit_lines(rest)

    def _emit_lines(self, raw: bytes) -> None:
        text = clean_transcript(raw)
        if self._line_shown:
            first = raw.split(b"\n", 1)[0].rstrip(b"\r")
            if b"\r" in first or b"\b" in first:
                text = "\n" + text  # the shown start of the line was overwritten later
        self._line_shown = False
        if text:
            self._write(text)


class RawTerminal:
    """Context manager: the tty on ``fd`` in raw mode (no-op when ``fd`` is not a tty)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._saved: list[Any] | None = None

    def __enter__(self) -> RawTerminal:
        if os.isatty(self.fd):
            self._saved = termios.tcgetattr(self.fd)
            tty.setraw(self.fd, termios.TCSANOW)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._saved is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
            self._saved = None


def terminal_size(fd: int, default: tuple[int, int] = (24, 80)) -> tuple[int, int]:
    """(rows, cols) of the terminal on ``fd``, clamped to what a session accepts."""
    try:
        size = os.get_terminal_size(fd)
        rows, cols = size.lines, size.columns
    except OSError:
        fallback = shutil.get_terminal_size((default[1], default[0]))
        rows, cols = fallback.lines, fallback.columns
    if rows <= 0 or cols <= 0:  # a pty nobody sized
        rows, cols = default
    return max(2, min(rows, 1000)), max(10, min(cols, 1000))


def silence_stdout() -> None:
    """After EPIPE, point stdout at /dev/null so interpreter shutdown cannot fail flushing it."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def format_age(created_at: str, now: datetime | None = None) -> str:
    """``"2024-05-01T10:00:00Z"`` -> ``"5m"`` (``"?"`` when unparsable)."""
    try:
        created = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
    except ValueError:
        return "?"
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    seconds = int(((now or datetime.now(UTC)) - created).total_seconds())
    if seconds < 0:
        return "0s"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces (the last column is not padded)."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in (headers, *rows):
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def error_line(line: str) -> None:
    """One error line for the person, on stderr (``sandbox: ...``)."""
    print(f"sandbox: {line}", file=sys.stderr, flush=True)


def stderr_line(line: str) -> None:
    """A progress line (an image build's), on stderr: stdout may be a pipe or the MCP wire."""
    print(line, file=sys.stderr, flush=True)


def usage_exit(command: str, message: str) -> NoReturn:
    """A usage error of ``sandbox COMMAND``: one line with the way to help, exit status 2."""
    print(
        f"sandbox {command}: usage error: {message}; hint: `sandbox {command} --help` shows the "
        "options and an example",
        file=sys.stderr,
    )
    raise SystemExit(2)
