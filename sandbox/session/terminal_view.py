"""What a session shows and takes: send, the three read views, read_log, resize, raw access.

The terminal as people and agents use it; what it draws is the ``Display``, fed by the
``ShellLink``'s reader.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from sandbox.errors import InvalidArgumentError
from sandbox.models import Cursor, LogChunk, ReadResult, ResizeResult, SendResult
from sandbox.session.shell_link import ShellLink
from sandbox.session.takeover import Takeover
from sandbox.terminal.keys import encode_keys, encode_text, parse_paste
from sandbox.terminal.stream import clean_transcript
from sandbox.terminal.transcript import complete_prefix, sanitize_terminal, utf8_complete_end

SEND_SETTLE_MS = 300  # send with wait_ms: return once the program paused this long
SCROLLBACK_BYTES = 4 * 1024 * 1024


class TerminalView:
    """send / read / read_log / resize / write_raw of one session."""

    def __init__(self, link: ShellLink, takeover: Takeover, *, max_bytes: int) -> None:
        self.link = link
        self.takeover = takeover  # while a person holds the terminal the agent does not type
        self.display = link.display
        self.log = link.log
        self._max_bytes = max_bytes  # of the "new" view, as of an execute's output

    def write_raw(self, data: bytes) -> None:
        """Type bytes into the terminal exactly as given."""
        self.link.require_alive().write(data)
        self.link.pacing.attend()
        self.link.touch()

    def wait_output(self, offset: int, timeout_s: float) -> int:
        """Block until the log grows past ``offset``, the shell ends, or the timeout; return the
        log's size (read the new bytes with ``log.read(offset, size)``)."""
        deadline = time.monotonic() + timeout_s
        with self.link.cond, self.link.pacing.watching():
            while self.log.size <= offset and self.link.alive:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.link.cond.wait(remaining)
            return self.log.size

    def send(
        self,
        *,
        text: str | None = None,
        keys: list[str] | None = None,
        paste: bool | str = "auto",
        wait_ms: int = 0,
        view: str = "new",
    ) -> SendResult:
        channel = self.link.require_alive()
        self.takeover.check_agent_turn(self.link.id)
        if text is None and not keys:
            raise InvalidArgumentError(
                "send needs text or keys", hint='e.g. text="y\\n" or keys=["ctrl+c"]'
            )
        data = b""
        if text:
            data += encode_text(
                text,
                paste=parse_paste(paste),
                bracketed_paste_mode=self.display.scanner.bracketed_paste,
            )
        if keys:
            data += encode_keys(keys, application_cursor=self.display.scanner.application_cursor)
        self.link.touch()
        channel.write(data)
        self.link.pacing.attend()
        if wait_ms <= 0:
            return SendResult(bytes_sent=len(data))
        read = self.read(view=view, idle_ms=min(wait_ms, SEND_SETTLE_MS), timeout_ms=wait_ms)
        return SendResult(bytes_sent=len(data), **read.model_dump())

    def read(
        self,
        *,
        view: str = "new",
        strip_ansi: bool = True,
        wait_for: str | None = None,
        timeout_ms: int = 0,
        idle_ms: int | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> ReadResult:
        if view not in ("new", "screen", "scrollback"):
            raise InvalidArgumentError(
                f"unknown view {view!r}", hint='view is "new", "screen" or "scrollback".'
            )
        pattern = _pattern(wait_for)
        self.link.touch()
        matched, idle = self._wait_for_view(
            pattern,
            idle_ms,
            timeout_ms,
            lambda: self._content(view, strip_ansi, offset, limit, peek=True)[0],
        )
        content, lines, has_more = self._content(view, strip_ansi, offset, limit, peek=False)
        snap = self.display.snapshot()
        link = self.link
        with link.cond:
            busy = link.tracker.running and link.alive
            exit_code = link.exit_code if not link.alive else link.tracker.last_exit_code
            exited = not link.alive
        return ReadResult(
            content=content,
            lines=lines,
            cursor=Cursor(row=snap.cursor_row, col=snap.cursor_col),
            rows=snap.rows,
            cols=snap.cols,
            alternate_screen=snap.alternate_screen,
            title=snap.title,
            matched=matched,
            idle=idle,
            exited=exited,
            exit_code=exit_code,
            has_more=has_more,
            busy=busy,
            notices=self.takeover.notices(),
        )

    def _wait_for_view(
        self,
        pattern: re.Pattern[str] | None,
        idle_ms: int | None,
        timeout_ms: int,
        peek: Callable[[], str],
    ) -> tuple[bool | None, bool]:
        """Wait until the view matches ``pattern``, the output paused ``idle_ms``, the shell
        ended or the timeout passed; return (matched, idle)."""
        called = time.monotonic()
        deadline = called + max(0, timeout_ms) / 1000
        link = self.link
        while True:
            if pattern is not None and pattern.search(peek()):
                return True, False
            now = time.monotonic()
            with link.cond:
                # quiet counts from this call at the earliest
                last = max(link.last_output, called)
                quiet_ms = (now - last) * 1000
                if idle_ms is not None and quiet_ms >= idle_ms and pattern is None:
                    return None, True
                if now >= deadline or not link.alive:
                    idle = idle_ms is not None and quiet_ms >= idle_ms
                    return (False if pattern is not None else None), idle
                wake = deadline
                if idle_ms is not None:
                    wake = min(wake, last + idle_ms / 1000)
                with link.pacing.watching():
                    link.cond.wait(max(0.005, min(wake - now, 0.25)))

    def _content(
        self, view: str, strip_ansi: bool, offset: int, limit: int | None, *, peek: bool
    ) -> tuple[str, int, bool]:
        if view == "screen":
            snap = self.display.snapshot()
            return snap.content, len(snap.lines), False
        end = self.log.size
        if view == "new":
            start = self.display.new_since(end, consume=not peek)
            has_more = end - start > self._max_bytes
            raw = self.log.read(max(start, end - self._max_bytes), end)
            text = clean_transcript(raw, strip_ansi=strip_ansi)
            return text, text.count("\n") + (1 if text and not text.endswith("\n") else 0), has_more
        # scrollback: history lines from the cleaned transcript, paged from the end
        raw = self.display.display_read(max(0, end - SCROLLBACK_BYTES), end)
        all_lines = clean_transcript(raw, strip_ansi=strip_ansi).split("\n")
        if all_lines and all_lines[-1] == "":
            all_lines.pop()
        limit = 100 if limit is None else max(0, limit)
        stop = len(all_lines) - max(0, offset)
        begin = max(0, stop - limit)
        page = all_lines[begin : max(0, stop)]
        return "\n".join(page), len(page), begin > 0 or end > SCROLLBACK_BYTES

    def resize(self, rows: int, cols: int) -> ResizeResult:
        if not (2 <= rows <= 1000 and 10 <= cols <= 1000):
            raise InvalidArgumentError(
                f"bad terminal size {rows}x{cols}", hint="rows 2..1000, cols 10..1000"
            )
        channel = self.link.require_alive()
        channel.resize(rows, cols)
        self.display.resize(rows, cols)
        if self.link.recording is not None:
            self.link.recording.resize(rows, cols)
        self.link.touch()
        return ResizeResult(rows=rows, cols=cols)

    def read_log(
        self,
        from_byte: int = 0,
        max_bytes: int = 65536,
        strip_ansi: bool = False,
        *,
        sanitize: bool = False,
    ) -> LogChunk:
        """Page through the raw log by byte offsets.

        ``strip_ansi``: plain text. ``sanitize``: the bytes keep what draws (colours, cursor
        movement) but never what acts on a terminal or hides text (titles, clipboard writes,
        DCS, queries: ``sanitize_terminal``); the MCP tool always asks for that, so an agent
        never gets raw terminal strings. Neither: the bytes exactly as recorded (decoded), for a
        program using the Python API."""
        if max_bytes <= 0 or max_bytes > 1024 * 1024:
            raise InvalidArgumentError(
                f"max_bytes must be 1..1048576, got {max_bytes}", hint="Page with next_byte."
            )
        total = self.log.size
        start = total + from_byte if from_byte < 0 else from_byte
        start = max(0, min(start, total))
        raw_data = self.log.read(start, start + max_bytes)
        # never cut a UTF-8 sequence in two: the next page starts where this one stopped
        if start + len(raw_data) < total:
            raw_data = raw_data[: utf8_complete_end(raw_data)]
            if sanitize and not strip_ansi:
                # nor an escape sequence: a cut OSC 52 would leak its payload as text
                whole = complete_prefix(raw_data)
                raw_data = raw_data[:whole] if whole > 0 else raw_data
        data = raw_data
        if strip_ansi:
            chunk = clean_transcript(data, strip_ansi=True)
        elif sanitize:
            chunk = sanitize_terminal(data).decode("utf-8", "replace")
        else:
            chunk = data.decode("utf-8", "replace")
        nxt = start + len(raw_data)
        return LogChunk(
            chunk=chunk, from_byte=start, next_byte=nxt, eof=nxt >= total, total_bytes=total
        )


def _pattern(wait_for: str | None) -> re.Pattern[str] | None:
    if not wait_for:
        return None
    try:
        return re.compile(wait_for, re.MULTILINE)
    except re.error as exc:
        raise InvalidArgumentError(
            f"wait_for is not a valid regular expression: {exc}",
            hint="Use Python regex syntax; escape special characters.",
        ) from exc
