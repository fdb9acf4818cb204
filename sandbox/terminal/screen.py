"""The screen model: pyte 0.8.2 with its gaps fixed, behind a filter that keeps it honest.

``TerminalScreen`` subclasses ``pyte.Screen`` (DESIGN.md §3 lists the gaps):

- a real alternate screen for DECSET 1049 / 1047 / 47 (pyte only records the mode): the main
  buffer is kept aside and comes back on leave; 1049 also saves and restores the cursor, 47 and
  1047 leave it where the program put it, as xterm does;
- ``draw`` rewritten: pyte stops drawing the rest of a text run at the first zero-width character
  that is not a combining mark (ZWJ, variation selectors, U+200B) or at a stray C0 control;
  here zero-width characters join the previous cell, wide characters take two cells (and wrap
  first when only one column is left), and half-overwritten wide characters are blanked;
- ``write_process_input`` and the report methods do nothing: queries are answered by the
  session from the raw stream (``StreamScanner``), never by the screen;
- pyte asserts or raises on a few legal-but-odd inputs (``ESC[5J``, ``ESC[d`` in origin mode
  without margins); those methods are guarded. DECCOLM (80/132 columns) is ignored as xterm does
  by default; SU/SD (``ESC[S``/``ESC[T``), REP (``ESC[b``, used by ncurses with
  xterm-256color), SCOSC/SCORC (``ESC[s``/``ESC[u``) and HPA (``ESC[```) are added;
- resizing keeps the cursor's line on screen (pyte drops lines from the top unconditionally),
  resizes the saved main buffer too, and extends tab stops.

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

import codecs
import copy
import logging
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pyte
from pyte import charsets, modes
from pyte.screens import Char, Margins, StaticDefaultDict, wcwidth

__all__ = ["ScreenModel", "ScreenSnapshot", "TerminalScreen"]

log = logging.getLogger(__name__)

Buffer = dict[int, StaticDefaultDict[int, Char]]

# Private modes (pyte stores them shifted left by 5).
_ALTERNATE_MODES = frozenset({1049, 1047, 47})
_DECCOLM = 3
_DECCKM = 1 << 5  # application cursor keys, as stored in ``Screen.mode``
_SAVEPOINT_LIMIT = 16  # pyte's DECSC stack is unbounded; xterm keeps one slot
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
# CSI functions pyte lacks, and the TerminalScreen methods that do them.
_EXTRA_CSI = {
    "S": "scroll_up",
    "T": "scroll_down",
    "b": "repeat_last",
    "`": "cursor_to_column",
    "s": "save_cursor_sco",
    "u": "restore_cursor_sco",
}
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


@dataclass
class _SavedMain:
    buffer: Buffer
    cursor: pyte.screens.Cursor
    g0_charset: str
    g1_charset: str
    charset: int


class TerminalScreen(pyte.Screen):
    """``pyte.Screen`` with an alternate screen, correct wide/zero-width drawing, a no-op
    ``write_process_input``, and guards where pyte asserts. ``title`` holds the window title."""

    def __init__(self, columns: int, lines: int) -> None:
        self.alternate = False
        self._main: _SavedMain | None = None
        self._last_char = ""
        self._cells: dict[str, Char] = {}
        self._cells_attrs: Char | None = None
        super().__init__(columns, lines)

    # -- lifecycle ---------------------------------------------------------------------------
    def reset(self) -> None:
        super().reset()
        self.g1_charset = charsets.LAT1_MAP  # xterm starts every G-set as ASCII
        self.alternate = False
        self._main = None
        self._last_char = ""

    def resize(self, lines: int | None = None, columns: int | None = None) -> None:
        lines = lines or self.lines
        columns = columns or self.columns
        if lines == self.lines and columns == self.columns:
            return
        shift = max(0, self.cursor.y - (lines - 1))  # keep the cursor's line on screen
        self.buffer = self._resized(self.buffer, shift, lines, columns)
        self.cursor.y -= shift
        self.cursor.x = min(self.cursor.x, columns - 1)
        if self._main is not None:
            self._main.buffer = self._resized(self._main.buffer, 0, lines, columns)
            self._main.cursor.y = min(self._main.cursor.y, lines - 1)
            self._main.cursor.x = min(self._main.cursor.x, columns - 1)
        if columns > self.columns:
            self.tabstops.update(range(self.columns - self.columns % 8 + 8, columns, 8))
        else:
            self.tabstops = {t for t in self.tabstops if t < columns}
        self.lines, self.columns = lines, columns
        self.margins = None
        self.dirty.update(range(lines))

    # -- alternate screen --------------------------------------------------------------------
    def set_mode(self, *modes_: int, **kwargs: Any) -> None:
        if kwargs.get("private"):
            for mode in modes_:
                if mode in _ALTERNATE_MODES:
                    self.enter_alternate()
            modes_ = tuple(m for m in modes_ if m not in _ALTERNATE_MODES and m != _DECCOLM)
        super().set_mode(*modes_, **kwargs)

    def reset_mode(self, *modes_: int, **kwargs: Any) -> None:
        if kwargs.get("private"):
            for mode in modes_:
                if mode in _ALTERNATE_MODES:
                    self.leave_alternate(restore_cursor=mode == 1049)
            modes_ = tuple(m for m in modes_ if m not in _ALTERNATE_MODES and m != _DECCOLM)
        super().reset_mode(*modes_, **kwargs)

    def enter_alternate(self) -> None:
        """Switch to a blank alternate screen, keeping the main one (and its cursor) aside."""
        if self.alternate:
            return
        self._main = _SavedMain(
            buffer=self.buffer,
            cursor=copy.copy(self.cursor),
            g0_charset=self.g0_charset,
            g1_charset=self.g1_charset,
            charset=self.charset,
        )
        self.buffer = self._new_buffer()
        self.alternate = True
        self.dirty.update(range(self.lines))

    def leave_alternate(self, *, restore_cursor: bool = True) -> None:
        """Drop the alternate screen and show the main one again; 1049 (``restore_cursor``)
        also puts the cursor back where it was on enter."""
        if not self.alternate or self._main is None:
            return
        main, self._main = self._main, None
        self.buffer = main.buffer
        if restore_cursor:
            self.cursor = main.cursor
            self.g0_charset, self.g1_charset = main.g0_charset, main.g1_charset
            self.charset = main.charset
            self.ensure_hbounds()
            self.ensure_vbounds()
        self.alternate = False
        self.dirty.update(range(self.lines))

    def _new_buffer(self) -> Buffer:
        return defaultdict(lambda: StaticDefaultDict(self.default_char))

    def _resized(self, buffer: Buffer, shift: int, lines: int, columns: int) -> Buffer:
        """``buffer``'s rows moved up by ``shift`` and cut to ``lines`` x ``columns``."""
        resized = self._new_buffer()
        for y, row in buffer.items():
            if 0 <= y - shift < lines:
                for x in [x for x in row if x >= columns]:
                    del row[x]
                resized[y - shift] = row
        return resized

    # -- drawing -----------------------------------------------------------------------------
    def draw(self, data: str) -> None:
        data = data.translate(self.g1_charset if self.charset else self.g0_charset)
        cursor = self.cursor
        columns = self.columns
        autowrap = modes.DECAWM in self.mode
        insert = modes.IRM in self.mode
        if cursor.attrs is not self._cells_attrs or len(self._cells) > 4096:
            self._cells, self._cells_attrs = {}, cursor.attrs  # one Char per (char, attrs)
        cells = self._cells
        for char in data:
            width = wcwidth(char)
            if width <= 0:
                if width == 0:
                    self._join_previous(char)
                continue  # a control character pyte's parser let through: not printable
            if cursor.x + width > columns:
                if autowrap:
                    self.dirty.add(cursor.y)
                    self.carriage_return()
                    self.linefeed()
                else:
                    cursor.x = max(0, columns - width)
            if insert:
                self.insert_characters(width)
            line = self.buffer[cursor.y]
            x = cursor.x
            cell = cells.get(char)
            if cell is None:
                cell = cells[char] = cursor.attrs._replace(data=char)
            self._unsplit(line, x, width)
            line[x] = cell
            if width == 2:
                line[x + 1] = cursor.attrs._replace(data="")
            cursor.x = x + width
            self._last_char = char
        self.dirty.add(cursor.y)

    def _unsplit(self, line: StaticDefaultDict[int, Char], x: int, width: int) -> None:
        """Blank the other half of any wide character the cells ``x .. x+width-1`` cut."""
        here = line.get(x)
        if here is not None and here.data == "" and x > 0:  # x is the right half of one
            line[x - 1] = line[x - 1]._replace(data=" ")
        after = line.get(x + width)
        if after is not None and after.data == "":  # the last cell is the left half of one
            line[x + width] = after._replace(data=" ")

    def _join_previous(self, char: str) -> None:
        """Attach a zero-width character (combining mark, ZWJ, variation selector) to the
        character before the cursor; with nothing before it on the line, drop it."""
        x = self.cursor.x
        if x == 0:
            return
        line = self.buffer[self.cursor.y]
        x = min(x, self.columns) - 1
        if line[x].data == "" and x > 0:  # the right half of a wide character
            x -= 1
        cell = line[x]
        if len(cell.data) < 16:
            line[x] = cell._replace(data=cell.data + char)

    def repeat_last(self, count: int | None = None) -> None:
        """REP: draw the last drawn character ``count`` more times."""
        if self._last_char:
            self.draw(self._last_char * min(count or 1, self.lines * self.columns))

    def save_cursor_sco(self, *_: int) -> None:
        """SCOSC (``ESC[s``): DECSC by another name (pyte passes a parameter it does not use)."""
        self.save_cursor()

    def restore_cursor_sco(self, *_: int) -> None:
        """SCORC (``ESC[u``)."""
        self.restore_cursor()

    # -- scrolling ---------------------------------------------------------------------------
    def scroll_up(self, count: int | None = None) -> None:
        """SU: move lines within the margins up, blank lines in at the bottom."""
        top, bottom = self.margins or Margins(0, self.lines - 1)
        count = min(count or 1, bottom - top + 1)
        for y in range(top, bottom + 1):
            row = self.buffer.pop(y + count, None) if y + count <= bottom else None
            if row is None:
                self.buffer.pop(y, None)
            else:
                self.buffer[y] = row
        self.dirty.update(range(top, bottom + 1))

    def scroll_down(self, count: int | None = None) -> None:
        """SD: move lines within the margins down, blank lines in at the top."""
        top, bottom = self.margins or Margins(0, self.lines - 1)
        count = min(count or 1, bottom - top + 1)
        for y in range(bottom, top - 1, -1):
            row = self.buffer.pop(y - count, None) if y - count >= top else None
            if row is None:
                self.buffer.pop(y, None)
            else:
                self.buffer[y] = row
        self.dirty.update(range(top, bottom + 1))

    # -- pyte's rough edges ------------------------------------------------------------------
    def save_cursor(self) -> None:
        super().save_cursor()
        del self.savepoints[:-_SAVEPOINT_LIMIT]

    def erase_in_display(self, how: int = 0, *args: Any, **kwargs: Any) -> None:
        if how in (0, 1, 2, 3):  # pyte raises UnboundLocalError on anything else
            super().erase_in_display(how)

    def erase_in_line(self, how: int = 0, private: bool = False) -> None:
        if how in (0, 1, 2):
            super().erase_in_line(how)

    def cursor_to_line(self, line: int | None = None) -> None:
        if modes.DECOM in self.mode and self.margins is None:  # pyte asserts here
            self.mode.discard(modes.DECOM)
        super().cursor_to_line(line)

    def write_process_input(self, data: str) -> None:
        """Never answer the program from here: the session answers queries (StreamScanner)."""

    def report_device_attributes(self, mode: int = 0, **kwargs: bool) -> None:
        """Answered by the session, not the screen."""

    def report_device_status(self, mode: int) -> None:
        """Answered by the session, not the screen."""


class _ByteStream(pyte.ByteStream):
    """pyte's ByteStream, always UTF-8, with the CSI functions ``TerminalScreen`` adds.

    pyte ignores charset designation (``ESC(0``) and SI/SO while it decodes UTF-8 itself;
    decoding here and leaving ``use_utf8`` off lets DEC line drawing work, as in xterm."""

    def __init__(self, screen: TerminalScreen) -> None:
        self.csi = {**pyte.ByteStream.csi, **_EXTRA_CSI}  # read when the parser starts
        super().__init__(screen)
        self.use_utf8 = False
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, data: bytes) -> None:  # type: ignore[override]  # bytes, as pyte's own
        pyte.Stream.feed(self, self._decoder.decode(data))

    def select_other_charset(self, code: str) -> None:
        """Always UTF-8 (``ESC % @`` would switch pyte to Latin-1)."""


class ScreenModel:
    """A ``TerminalScreen`` and its stream, fed through the filter described above.

    Not thread-safe; pyte is slow (DESIGN.md §2), so keep it off the reader threads."""

    def __init__(self, rows: int, cols: int) -> None:
        self.parse_errors = 0  # exceptions pyte raised (and we survived); tests expect 0
        self._build(rows, cols)

    def _build(self, rows: int, cols: int) -> None:
        self.screen = TerminalScreen(cols, rows)
        self._stream = _ByteStream(self.screen)
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
