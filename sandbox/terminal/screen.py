"""The screen model: the emulator (``sandbox.terminal.emulator``) behind a filter that keeps
it honest.

``ScreenModel`` feeds it bytes through a filter, because pyte's parser misreads much of what
real programs send: it prints APC/DCS payloads as text, swallows any OSC until a terminator that
may never come, dispatches ``ESC[>4;1m`` as SGR, prints the rest of ``ESC[!p``, ``ESC[<u`` or
``ESC[4:3m`` as text, and raises on ``ESC[1;2;3A``. The filter drops every string sequence
(setting the title itself from OSC 0/2, so OSC 777 markers and clipboard writes never reach
pyte), drops CSI sequences pyte cannot parse, trims extra parameters, and keeps an incomplete
trailing sequence for the next ``feed``. The stream decodes UTF-8 itself, so DEC line drawing
(``ESC(0``, as ncurses sends for box borders) still works.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from pyte import modes

from sandbox.terminal.emulator import TerminalScreen, TerminalStream

__all__ = ["ScreenModel", "ScreenSnapshot", "TerminalScreen"]

log = logging.getLogger(__name__)

_DECCKM = 1 << 5  # application cursor keys, as stored in ``Screen.mode``
_TITLE_STACK_LIMIT = 10  # xterm's
_TITLE_LIMIT = 4096  # bytes of an OSC 0/2 payload kept
_CARRY_LIMIT = 256  # an unfinished CSI longer than this is garbage and goes to pyte as is

# CSI finals pyte gets to see (non-private), with the number of parameters each takes
# (None: any number). Everything else is dropped: pyte would debug() it at best.
_CSI_ARITY: dict[bytes, int | None] = {
    b"@": 1, b"A": 1, b"B": 1, b"C": 1, b"D": 1, b"E": 1, b"F": 1, b"G": 1, b"H": 2,
    b"J": 1, b"K": 1, b"L": 1, b"M": 1, b"P": 1, b"S": 1, b"T": 1, b"X": 1, b"`": 1,
    b"a": 1, b"b": 1, b"d": 1, b"e": 1, b"f": 2, b"g": 1, b"h": None, b"l": None,
    b"m": None, b"r": 2, b"s": 0, b"u": 0,
}  # fmt: skip
# The same after ``?`` (DEC private): modes and selective erase.
_CSI_PRIVATE_ARITY: dict[bytes, int | None] = {b"h": None, b"l": None, b"J": 1, b"K": 1}

_STRING_START = re.compile(rb"\x1b[\]P_^X]")
_STRING_END = re.compile(rb"[\x07\x18\x1a\x1b]")
# Everything pyte would see that needs a decision: CSI (params, intermediates, final),
# other escapes (intermediates, final), and C1 controls encoded in UTF-8.
_SEQUENCE = re.compile(
    rb"\x1b\[([\x30-\x3f]*)([\x20-\x2f]*)([\x40-\x7e])?"
    rb"|\x1b([\x20-\x2f]*)([\x30-\x7e])?"
    rb"|\xc2[\x80-\x9f]"
)
_INCOMPLETE = re.compile(rb"\x1b(?:\[[\x30-\x3f]*[\x20-\x2f]*|[\x20-\x2f]*)")
_PYTE_PARAMS = re.compile(rb"\??[0-9;]*")
_TITLE_PUSH_POP = re.compile(rb"(2[23])(?:;([0-9]*))?(?:;[0-9]*)?")
_CONTROL_CHARS = re.compile("[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class ScreenSnapshot:
    """What the terminal shows: one string per row (trailing spaces stripped; a wide character
    appears once), the cursor as 0-based row and cell column, and the screen's state."""

    lines: list[str]
    content: str
    cursor_row: int
    cursor_col: int
    rows: int
    cols: int
    alternate_screen: bool
    title: str


class ScreenModel:
    """A ``TerminalScreen`` and its stream, fed through the filter described above.

    Not thread-safe; pyte is slow (DESIGN.md §2), so keep it off the reader threads."""

    def __init__(self, rows: int, cols: int) -> None:
        self.parse_errors = 0  # exceptions pyte raised (and we survived); tests expect 0
        self._build(rows, cols)

    def _build(self, rows: int, cols: int) -> None:
        self.screen = TerminalScreen(cols, rows)
        self._stream = TerminalStream(self.screen)
        self._carry = b""  # an unfinished sequence from the end of the last feed
        self._string: bytes | None = None  # the kind of string sequence we are inside
        self._payload = bytearray()  # an OSC's payload, for titles
        self._titles: list[str] = []  # XTWINOPS 22/23 title stack

    # -- state -------------------------------------------------------------------------------
    @property
    def rows(self) -> int:
        return int(self.screen.lines)

    @property
    def cols(self) -> int:
        return int(self.screen.columns)

    @property
    def alternate(self) -> bool:
        return self.screen.alternate

    @property
    def title(self) -> str:
        return str(self.screen.title)

    @title.setter
    def title(self, value: str) -> None:
        self.screen.title = value

    @property
    def application_cursor(self) -> bool:
        """DECCKM: arrow keys must be sent as ``ESC O A`` rather than ``ESC [ A``."""
        return _DECCKM in self.screen.mode

    @application_cursor.setter
    def application_cursor(self, on: bool) -> None:
        if on:
            self.screen.mode.add(_DECCKM)
        else:
            self.screen.mode.discard(_DECCKM)

    def reset(self) -> None:
        """Back to a blank main screen, as if nothing had been fed (size kept)."""
        self._build(self.rows, self.cols)

    def resize(self, rows: int, cols: int) -> None:
        self.screen.resize(rows, cols)

    def cursor_to_bottom(self) -> None:
        """Put the cursor at the start of the last row, where long scrolling output leaves it
        (for a caller that starts feeding from the middle of such output)."""
        self.screen.cursor_position(self.rows, 1)

    def set_alternate(self, on: bool) -> None:
        """Put the screen in (or out of) the alternate screen, for a caller that starts
        feeding from the middle of a stream."""
        if on:
            self.screen.enter_alternate()
        else:
            self.screen.leave_alternate()

    def cursor_report(self) -> bytes:
        """The CPR reply (``ESC[row;colR``, 1-based) for the current cursor."""
        screen = self.screen
        row = screen.cursor.y + 1
        if modes.DECOM in screen.mode and screen.margins is not None:
            row -= screen.margins.top
        col = min(screen.cursor.x, screen.columns - 1) + 1
        return b"\x1b[%d;%dR" % (row, col)

    def snapshot(self) -> ScreenSnapshot:
        screen = self.screen
        cols = screen.columns
        lines: list[str] = []
        for y in range(screen.lines):
            row = screen.buffer.get(y)
            if not row:
                lines.append("")
            else:
                lines.append("".join([row[x].data for x in range(cols)]).rstrip(" "))
        last = len(lines)
        while last and not lines[last - 1]:
            last -= 1
        return ScreenSnapshot(
            lines=lines,
            content="\n".join(lines[:last]),
            cursor_row=screen.cursor.y,
            cursor_col=min(screen.cursor.x, cols - 1),
            rows=screen.lines,
            cols=cols,
            alternate_screen=screen.alternate,
            title=screen.title,
        )

    # -- feeding -----------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """Feed raw terminal output; sequences may be split anywhere between calls."""
        buf = self._carry + data if self._carry else data
        self._carry = b""
        pos, end = 0, len(buf)
        while pos < end:
            if self._string is None:
                match = _STRING_START.search(buf, pos)
                stop = end if match is None else match.start()
                if stop > pos:
                    self._pass(buf[pos:stop], at_end=match is None)
                if match is None:
                    break
                self._string = buf[stop + 1 : stop + 2]
                self._payload.clear()
                pos = match.end()
                continue
            match = _STRING_END.search(buf, pos)
            if match is None:
                self._collect(buf[pos:])
                break
            stop = match.start()
            self._collect(buf[pos:stop])
            if buf[stop] == 0x1B:
                if stop + 1 == end:  # maybe the start of ST: decide on the next feed
                    self._carry = b"\x1b"
                    break
                # ST ends the string; any other ESC aborts it and starts a new sequence.
                pos = stop + 2 if buf[stop + 1] == 0x5C else stop
            else:
                pos = stop + 1
            self._end_string()

    def _collect(self, payload: bytes) -> None:
        if self._string == b"]" and len(self._payload) < _TITLE_LIMIT:
            self._payload += payload[: _TITLE_LIMIT - len(self._payload)]

    def _end_string(self) -> None:
        if self._string == b"]":
            code, _, text = bytes(self._payload).partition(b";")
            if code in (b"0", b"2"):
                title = text.decode("utf-8", "replace")
                self.screen.title = _CONTROL_CHARS.sub("", title)
        self._string = None
        self._payload.clear()

    def _pass(self, data: bytes, *, at_end: bool) -> None:
        """Feed pyte the bytes between string sequences, minus what it would misparse."""
        if at_end:
            esc = data.rfind(b"\x1b", max(0, len(data) - _CARRY_LIMIT))
            if esc != -1 and _INCOMPLETE.fullmatch(data, esc) is not None:
                self._carry = data[esc:]
                data = data[:esc]
        if b"\x1b" in data or b"\xc2" in data:
            data = _SEQUENCE.sub(self._filter_sequence, data)
        if not data:
            return
        try:
            self._stream.feed(data)
        except Exception:  # pyte has more corners than we found; never lose the session
            self.parse_errors += 1
            log.debug("pyte failed on %d bytes", len(data), exc_info=True)

    def _filter_sequence(self, match: re.Match[bytes]) -> bytes:
        params, intermediates, final = match.group(1, 2, 3)
        if params is not None:  # CSI
            if final is None or intermediates:
                return b""
            if final == b"t":
                self._title_stack_op(params)
                return b""
            if _PYTE_PARAMS.fullmatch(params) is None:
                return b""
            private = params[:1] == b"?"
            arity = (_CSI_PRIVATE_ARITY if private else _CSI_ARITY).get(final, -1)
            if arity == -1:
                return b""
            if arity == 0 and params:
                return b""  # e.g. ``ESC[1;80s`` sets left/right margins, which we lack
            if arity is not None and params.count(b";") >= max(arity, 1):
                kept = b";".join(params.split(b";")[:arity])
                return b"\x1b[" + kept + final
            return match.group()
        intermediates, final = match.group(4, 5)
        if intermediates is None or final is None:
            return b""  # a C1 control, or ESC followed by a control character
        if not intermediates:
            return b"" if final in b"]P_^X[" else match.group()
        if intermediates in (b"(", b")", b"#"):
            return match.group()
        return b""  # ESC SP F, ESC % G, G2/G3 designations: pyte would print the final

    def _title_stack_op(self, params: bytes) -> None:
        match = _TITLE_PUSH_POP.fullmatch(params)
        if match is None or match.group(2) not in (None, b"", b"0", b"2"):
            return
        if match.group(1) == b"22":
            self._titles.append(self.title)
            del self._titles[:-_TITLE_STACK_LIMIT]
        elif self._titles:
            self.title = self._titles.pop()
