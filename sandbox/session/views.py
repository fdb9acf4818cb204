"""What a session shows and takes: send, the three read views, read_log, resize, raw access."""

from __future__ import annotations

import re
import time

from sandbox.errors import InvalidArgumentError
from sandbox.models import Cursor, LogChunk, ReadResult, ResizeResult, SendResult
from sandbox.session.state import SessionState
from sandbox.terminal.keys import encode_keys, encode_text, parse_paste
from sandbox.terminal.stream import ScreenSnapshot, clean_transcript
from sandbox.terminal.transcript import complete_prefix, sanitize_terminal, utf8_complete_end

SEND_SETTLE_MS = 300  # send with wait_ms: return once the program paused this long
SCROLLBACK_BYTES = 4 * 1024 * 1024


class ViewsMixin(SessionState):
    """send / read / read_log / resize / write_raw for ``Session``."""

    def write_raw(self, data: bytes) -> None:
        """Type bytes into the terminal exactly as given."""
        self._require_alive().write(data)
        self._attend()
        self._touch()

    def wait_output(self, offset: int, timeout_s: float) -> int:
        """Block until the log grows past ``offset``, the shell ends, or the timeout; return the
        log's size (read the new bytes with ``log.read(offset, size)``)."""
        deadline = time.monotonic() + timeout_s
        with self._cond, self._watching():
            while self.log.size <= offset and self._alive:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
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
        channel = self._require_alive()
        self.takeover.check_agent_turn(self.id)
        if text is None and not keys:
            raise InvalidArgumentError(
                "send needs text or keys", hint='e.g. text="y\\n" or keys=["ctrl+c"]'
            )
        data = b""
        if text:
            data += encode_text(
                text, paste=parse_paste(paste), bracketed_paste_mode=self._scanner.bracketed_paste
            )
        if keys:
            data += encode_keys(keys, application_cursor=self._scanner.application_cursor)
        self._touch()
        channel.write(data)
        self._attend()
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
        pattern = None
        if wait_for:
            try:
                pattern = re.compile(wait_for, re.MULTILINE)
            except re.error as exc:
                raise InvalidArgumentError(
                    f"wait_for is not a valid regular expression: {exc}",
                    hint="Use Python regex syntax; escape special characters.",
                ) from exc
        self._touch()
        called = time.monotonic()
        deadline = called + max(0, timeout_ms) / 1000
        matched: bool | None = None
        idle = False
        while True:
            content, lines, has_more = self._content(view, strip_ansi, offset, limit, peek=True)
            if pattern is not None and pattern.search(content):
                matched = True
                break
            now = time.monotonic()
            with self._cond:
                last = max(self._last_output, called)  # quiet counts from this call at the earliest
                quiet = now - last
                if idle_ms is not None and quiet * 1000 >= idle_ms and pattern is None:
                    idle = True
                    break
                if now >= deadline or not self._alive:
                    idle = idle_ms is not None and quiet * 1000 >= idle_ms
                    if pattern is not None:
                        matched = False
                    break
                wake = deadline
                if idle_ms is not None:
                    wake = min(wake, last + idle_ms / 1000)
                with self._watching():
                    self._cond.wait(max(0.005, min(wake - now, 0.25)))
        content, lines, has_more = self._content(view, strip_ansi, offset, limit, peek=False)
        snap = self._snapshot()
        with self._cond:
            p = self._pending
            busy = p is not None and not p.finished and self._alive
            exit_code = self._exit_code if not self._alive else self._last_exit_code
            exited = not self._alive
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

    def _content(
        self, view: str, strip_ansi: bool, offset: int, limit: int | None, *, peek: bool
    ) -> tuple[str, int, bool]:
        if view == "screen":
            snap = self._snapshot()
            return snap.content, len(snap.lines), False
        end = self.log.size
        if view == "new":
            with self._cond:
                start = self._read_offset
                if not peek:
                    self._read_offset = end
            has_more = end - start > self._execute_max_bytes
            raw = self.log.read(max(start, end - self._execute_max_bytes), end)
            text = clean_transcript(raw, strip_ansi=strip_ansi)
            return text, text.count("\n") + (1 if text and not text.endswith("\n") else 0), has_more
        # scrollback: history lines from the cleaned transcript, paged from the end
        raw = self._display_read(max(0, end - SCROLLBACK_BYTES), end)
        all_lines = clean_transcript(raw, strip_ansi=strip_ansi).split("\n")
        if all_lines and all_lines[-1] == "":
            all_lines.pop()
        limit = 100 if limit is None else max(0, limit)
        stop = len(all_lines) - max(0, offset)
        begin = max(0, stop - limit)
        page = all_lines[begin : max(0, stop)]
        return "\n".join(page), len(page), begin > 0 or end > SCROLLBACK_BYTES

    def _display_read(self, start: int, stop: int) -> bytes:
        """Log bytes for the views people look at (screen, scrollback): each command's
        protocol line (``__sb_s NONCE; eval $'...'``) is shown as the command itself."""
        data = self.log.read(start, stop)
        with self._cond:
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

    def _snapshot(self) -> ScreenSnapshot:
        with self._screen_lock:
            self._screen.catch_up(self.log.size, self._display_read, self._scanner)
            return self._screen.snapshot()

    def resize(self, rows: int, cols: int) -> ResizeResult:
        if not (2 <= rows <= 1000 and 10 <= cols <= 1000):
            raise InvalidArgumentError(
                f"bad terminal size {rows}x{cols}", hint="rows 2..1000, cols 10..1000"
            )
        channel = self._require_alive()
        channel.resize(rows, cols)
        with self._screen_lock:
            self._screen.resize(rows, cols)
        if self.recording is not None:
            self.recording.resize(rows, cols)
        self.rows, self.cols = rows, cols
        self._touch()
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
