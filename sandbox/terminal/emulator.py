"""The terminal emulator: pyte 0.8.2 with its gaps fixed.

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

``TerminalStream`` is pyte's byte stream for it: always UTF-8, decoded here, with the CSI
functions ``TerminalScreen`` adds. ``sandbox.terminal.screen`` feeds it through a filter.
"""

from __future__ import annotations

import codecs
import copy
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pyte
from pyte import charsets, modes
from pyte.screens import Char, Margins, StaticDefaultDict, wcwidth

__all__ = ["Buffer", "TerminalScreen", "TerminalStream"]


Buffer = dict[int, StaticDefaultDict[int, Char]]

# Private modes (pyte stores them shifted left by 5).
_ALTERNATE_MODES = frozenset({1049, 1047, 47})
_DECCOLM = 3
_SAVEPOINT_LIMIT = 16  # pyte's DECSC stack is unbounded; xterm keeps one slot

# CSI functions pyte lacks, and the TerminalScreen methods that do them.
_EXTRA_CSI = {
    "S": "scroll_up",
    "T": "scroll_down",
    "b": "repeat_last",
    "`": "cursor_to_column",
    "s": "save_cursor_sco",
    "u": "restore_cursor_sco",
}


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
        if autowrap and not insert and data.isascii() and data.isprintable():
            self._draw_ascii(data, cells)
            return
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

    def _draw_ascii(self, data: str, cells: dict[str, Char]) -> None:
        """``draw`` for printable ASCII with autowrap on (most output): one cell per
        character, a row's worth at a time."""
        cursor = self.cursor
        columns = self.columns
        while data:
            if cursor.x >= columns:
                self.dirty.add(cursor.y)
                self.carriage_return()
                self.linefeed()
            x = cursor.x
            piece, data = data[: columns - x], data[columns - x :]
            line = self.buffer[cursor.y]
            self._unsplit(line, x, len(piece))
            for char in set(piece).difference(cells):
                cells[char] = cursor.attrs._replace(data=char)
            line.update(zip(range(x, x + len(piece)), map(cells.__getitem__, piece), strict=True))
            cursor.x = x + len(piece)
            self._last_char = piece[-1]
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


class TerminalStream(pyte.ByteStream):
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
