"""The terminal output pipeline: raw bytes in; queries, transcripts and screens out.

Raw bytes from the TTY are the truth (DESIGN.md §3); everything here is pure (no Docker, no
threads) and split by cost:

- ``StreamScanner`` runs in the socket reader thread on every chunk, so it only does what must
  happen at once and costs a ``bytes.__contains__`` when a chunk holds no ESC. It finds the
  queries a program is blocked on (cursor position, device attributes) for the session to
  answer (``DA1_REPLY``, ``DA2_REPLY``, ``LazyScreen.cursor_report``), and records where the
  stream can be replayed from: alternate screen enter/leave and full clears ("restart points"),
  plus the state a replay would miss (title, application cursor keys).
- ``clean_transcript`` (``transcript.py``) turns a byte range into text for ``execute`` and the
  "new"/"scrollback" views, without pyte.
- ``LazyScreen`` owns a ``ScreenModel`` (``screen.py``: pyte with its gaps fixed) and parses
  nothing until someone asks for the screen. Then it feeds at most ``backlog_limit`` bytes:
  when more is pending it resets and replays only the tail, starting at a restart point when one
  is close enough, and skipping whole alternate-screen sessions that ended before the end
  (their main screen comes back unchanged on leave). Scrolling shell output replays exactly
  from its last ``rows`` lines (``exact_tail``); other output from just after a newline within
  the budget. While a program holds the alternate screen, the main screen behind it is rebuilt
  only when it leaves. pyte manages 0.3-2 MB/s, so a snapshot after any amount of output
  costs a few milliseconds to a few tens.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from sandbox.terminal.screen import ScreenModel, ScreenSnapshot, TerminalScreen
from sandbox.terminal.transcript import clean_transcript, complete_prefix

__all__ = [
    "DA1_REPLY",
    "DA2_REPLY",
    "LazyScreen",
    "RestartPoint",
    "ScanResult",
    "ScreenModel",
    "ScreenSnapshot",
    "StreamScanner",
    "TerminalScreen",
    "clean_transcript",
    "complete_prefix",
]

log = logging.getLogger(__name__)

#: Primary device attributes: a VT220 with ANSI colour (what programs expect of an xterm-alike).
DA1_REPLY = b"\x1b[?62;22c"
#: Secondary device attributes: terminal type 0 (VT100), firmware 10, no ROM cartridge.
#: Deliberately not xterm's 41: vim then skips xterm-only probing it could wait on.
DA2_REPLY = b"\x1b[>0;10;1c"

_QUERY_NAMES = {
    b"6n": "cpr",
    b"?6n": "cpr",
    b"c": "da1",
    b"0c": "da1",
    b">c": "da2",
    b">0c": "da2",
}
_ALTERNATE_MODES = frozenset({b"1049", b"1047", b"47"})
_SCAN = re.compile(
    rb"\x1b(?:"
    rb"\[(?P<query>\??6n|0?c|>0?c)"
    rb"|\[\?(?P<modes>[0-9;]{1,40})(?P<set>[hl])"
    rb"|\[(?P<clear>2)J"
    rb"|(?P<ris>c)"
    rb"|\[(?P<stack>2[23])(?:;(?P<which>[0-9]*))?(?:;[0-9]*)?t"
    rb"|\][02];(?P<title>[^\x07\x1b]{0,200})(?:\x07|\x1b\\)"
    rb")"
)
# Every sequence _SCAN finds contains one of these; ``bytes.__contains__`` is memmem-fast. An
# OSC counts only as a title (0 or 2): a chunk whose only sequences are the marker protocol's
# (OSC 777) is not searched further.
_HINTS = (
    b"\x1b[?",
    b"\x1b[6n",
    b"\x1b[c",
    b"\x1b[0c",
    b"\x1b[>",
    b"\x1b[2",
    b"\x1bc",
    b"\x1b]0;",
    b"\x1b]2;",
)
# Sequences that change nothing but the row the cursor is on (SGR, erase/move within the row,
# ECH/DCH/ICH), modes that draw nothing (cursor keys, cursor visibility, bracketed paste, mouse,
# focus, synchronized output), OSC strings, keypad modes and the default G0 charset.
_IN_ROW = re.compile(
    rb"\x1b(?:\[[0-9;:]*[mKGCDXP@]"
    rb"|\[\?(?:1|12|25|1000|1002|1003|1004|1005|1006|1015|2004|2026)"
    rb"(?:;(?:1|12|25|1000|1002|1003|1004|1005|1006|1015|2004|2026))*[hl]"
    rb"|\][^\x07\x1b]*(?:\x07|\x1b\\)|\(B|[=>])"
)
EXACT_FEED = 2048  # pending bytes fed as they are, without looking for a shorter replay
_CARRY = 64  # bytes of the previous chunk kept to find sequences split across chunks
_EVENT_LIMIT = 1024
_TITLE_STACK_LIMIT = 10


@dataclass
class ScanResult:
    """What one chunk asks for: ``queries`` in order ("cpr", "da1", "da2")."""

    queries: list[str] = field(default_factory=list)


class RestartPoint(NamedTuple):
    """An offset (just after the sequence) where replay can start: the alternate screen was
    entered (``enter``) or left (``leave``) or the screen was fully cleared (``clear``), and
    whether the alternate screen is active from there on."""

    offset: int
    kind: str
    alternate: bool


class StreamScanner:
    """Cheap per-chunk scan of the raw stream (runs in the reader thread).

    ``restart_offset`` / ``restart_alternate`` are the latest restart point, ``alternate`` the
    current mode, ``title``, ``application_cursor`` and ``bracketed_paste`` (DECSET 2004) the latest
    values seen. Reads from other
    threads are safe; ``scan`` must be called by one thread, in stream order.
    """

    def __init__(self) -> None:
        self.restart_offset = 0
        self.restart_alternate = False
        self.alternate = False
        self.application_cursor = False
        self.bracketed_paste = False
        self.title = ""
        self.scanned_upto = 0
        self._carry = b""
        self._titles: list[str] = []
        self._events: deque[RestartPoint] = deque()
        self._base_alternate = False  # the mode before the oldest event kept
        self._lock = threading.Lock()

    def scan(self, chunk: bytes, offset: int) -> ScanResult:
        """Scan ``chunk``, which starts at absolute log offset ``offset``."""
        result = ScanResult()
        carry = self._carry if offset == self.scanned_upto else b""
        if b"\x1b" in chunk or b"\x1b" in carry:
            buf = carry + chunk
            base = offset - len(carry)
            if not any(hint in buf for hint in _HINTS):  # colour-only output stops here
                self._remember(chunk, carry, offset)
                return result
            for match in _SCAN.finditer(buf):
                if match.end() > len(carry):  # matches inside the carry were seen last time
                    self._on_match(match, base, result)
        self._remember(chunk, carry, offset)
        return result

    def _remember(self, chunk: bytes, carry: bytes, offset: int) -> None:
        self._carry = chunk[-_CARRY:] if len(chunk) >= _CARRY else (carry + chunk)[-_CARRY:]
        self.scanned_upto = offset + len(chunk)

    def _on_match(self, match: re.Match[bytes], base: int, result: ScanResult) -> None:
        query = match.group("query")
        if query is not None:
            result.queries.append(_QUERY_NAMES[query])
            return
        end = base + match.end()
        modes = match.group("modes")
        if modes is not None:
            on = match.group("set") == b"h"
            switched = False
            for mode in modes.split(b";"):
                if mode in _ALTERNATE_MODES:
                    switched = True
                elif mode == b"1":
                    self.application_cursor = on
                elif mode == b"2004":
                    self.bracketed_paste = on
            if switched and on != self.alternate:
                self._add(RestartPoint(end, "enter" if on else "leave", on))
        elif match.group("clear") is not None:
            self._add(RestartPoint(end, "clear", self.alternate))
        elif match.group("ris") is not None:
            self.application_cursor = False
            self.bracketed_paste = False
            if self.alternate:
                self._add(RestartPoint(end, "leave", False))
            self._add(RestartPoint(end, "clear", False))
        elif match.group("title") is not None:
            self.title = match.group("title").decode("utf-8", "replace")
        elif match.group("which") in (None, b"", b"0", b"2"):
            if match.group("stack") == b"22":
                self._titles.append(self.title)
                del self._titles[:-_TITLE_STACK_LIMIT]
            elif self._titles:
                self.title = self._titles.pop()

    def _add(self, point: RestartPoint) -> None:
        with self._lock:
            self._events.append(point)
            if len(self._events) > _EVENT_LIMIT:
                self._base_alternate = self._events.popleft().alternate
            self.restart_offset, self.restart_alternate = point.offset, point.alternate
            self.alternate = point.alternate

    def restart_points(self, end: int) -> tuple[bool, list[RestartPoint]]:
        """The mode before the oldest point kept, and the points at or before ``end``."""
        with self._lock:
            return self._base_alternate, [p for p in self._events if p.offset <= end]

    def alternate_at(self, offset: int) -> bool:
        """Whether the alternate screen is active at ``offset`` (as far as the history kept
        tells)."""
        return _alternate_at(offset, *self.restart_points(offset))


class _Range(NamedTuple):
    start: int
    stop: int
    clipped: bool  # starts at an arbitrary offset: skip to a line start first


class LazyScreen:
    """The session's screen, fed only when asked (``catch_up``) and never more than
    ``backlog_limit`` bytes at a time. Not thread-safe: the caller holds a lock."""

    def __init__(self, rows: int, cols: int, *, backlog_limit: int = 32 * 1024) -> None:
        self.backlog_limit = backlog_limit
        self.fed_upto = 0
        self.model = ScreenModel(rows, cols)
        self._snapshot: ScreenSnapshot | None = None
        self._main_stale = False  # the main screen behind the alternate one was not rebuilt

    def catch_up(
        self, end: int, read_range: Callable[[int, int], bytes], scanner: StreamScanner
    ) -> None:
        """Bring the screen up to absolute log offset ``end``, reading with
        ``read_range(start, stop)``."""
        if end <= self.fed_upto:
            return
        pending = end - self.fed_upto
        must_replay = self._main_stale and self._leaves(end, scanner)
        if pending <= EXACT_FEED and not must_replay:
            self._feed(read_range(self.fed_upto, end), end)
            return
        base, points = scanner.restart_points(end)
        ranges = _plan(end, self.backlog_limit, base, points)
        modes = [_alternate_at(r.start, base, points) for r in ranges]
        # In the alternate screen, the main one is not drawn until the program leaves it: it
        # is rebuilt then (``_main_stale``), not now.
        skip_main = bool(modes) and modes[-1]
        replay: list[tuple[bool, bool, bytes]] = []  # (alternate, from the last row, bytes)
        for (start, stop, clipped), alternate in zip(ranges, modes, strict=True):
            if skip_main and not alternate:
                continue
            data = read_range(start, stop)
            tail = None if alternate else exact_tail(data, self.model.rows)
            if tail is not None:
                replay.append((False, True, tail))
            else:
                replay.append((alternate, False, _clip(data, clipped)))
        if not must_replay and pending <= sum(len(data) for _, _, data in replay):
            self._feed(read_range(self.fed_upto, end), end)  # as cheap, and exact
            return
        log.debug("screen: %d bytes behind, replaying %s", pending, ranges)
        self._main_stale = skip_main
        self.model.reset()
        self.model.title = scanner.title
        self.model.application_cursor = scanner.application_cursor
        for alternate, from_bottom, data in replay:
            self.model.set_alternate(alternate)
            if from_bottom:
                self.model.cursor_to_bottom()
            self.model.feed(data)
        self._snapshot = None
        self.fed_upto = end

    def _leaves(self, end: int, scanner: StreamScanner) -> bool:
        """Whether the stream leaves the alternate screen between what was fed and ``end``."""
        _, points = scanner.restart_points(end)
        return any(p.kind == "leave" and p.offset > self.fed_upto for p in points)

    def _feed(self, data: bytes, end: int) -> None:
        self.model.feed(data)
        self._snapshot = None
        self.fed_upto = end

    @property
    def application_cursor(self) -> bool:
        return self.model.application_cursor

    def snapshot(self) -> ScreenSnapshot:
        """What the screen shows (kept until more is fed or it is resized)."""
        if self._snapshot is None:
            self._snapshot = self.model.snapshot()
        return self._snapshot

    def cursor_report(self) -> bytes:
        return self.model.cursor_report()

    def resize(self, rows: int, cols: int) -> None:
        """Resize now; bytes not yet fed are then drawn at the new size (a program redraws
        after SIGWINCH anyway). Call ``catch_up`` first for an exact result."""
        self.model.resize(rows, cols)
        self._snapshot = None


def _plan(end: int, budget: int, base: bool, points: list[RestartPoint]) -> list[_Range]:
    """Which ranges before ``end`` rebuild the screen, in order, within ``budget`` bytes.

    Walking back from ``end``: the current screen's bytes since its last restart point; if that
    is the alternate screen, then the main screen's bytes before the alternate one was entered.
    Main-screen stretches are followed back across whole alternate-screen sessions (skipped:
    the main screen comes back unchanged when one ends) until a clear or the budget stops them.
    """
    ranges: list[_Range] = []
    stop = end
    i = len(points) - 1
    while budget > 0:
        while i >= 0 and points[i].offset > stop:
            i -= 1
        natural = points[i].offset if i >= 0 else 0
        start = max(natural, stop - budget)
        if stop > start:
            ranges.append(_Range(start, stop, clipped=start > natural))
            budget -= stop - start
        if start > natural or i < 0:
            break
        point = points[i]
        if point.kind == "clear" and not point.alternate:
            break  # nothing before a main-screen clear shows
        # Entering, or clearing, the alternate screen: the main screen's state is whatever it
        # was before the alternate session began; leaving: skip the session back to its start.
        while i >= 0 and points[i].kind != "enter":
            if points[i].kind == "clear" and not points[i].alternate:
                break
            i -= 1
        if i < 0 or points[i].kind != "enter":
            break
        stop = points[i].offset
        i -= 1
    ranges.reverse()
    return ranges


def _alternate_at(offset: int, base: bool, points: list[RestartPoint]) -> bool:
    mode = base
    for point in points:
        if point.offset > offset:
            break
        mode = point.alternate
    return mode


def exact_tail(data: bytes, rows: int) -> bytes | None:
    """The end of a main-screen stretch that alone draws the screen exactly as all of it
    would, fed with the cursor at the start of the last row; None when no short end does.

    Checked: the last ``2 * rows - 1`` newlines (``CR LF``) move the cursor across rows and
    nothing else does (only in-row sequences: colours, erase in line, column moves; modes that
    draw nothing; OSC strings). The first ``rows - 1`` of them bring the cursor to the last row
    from wherever it was, so each of the last ``rows`` scrolls a blank row in: every row left
    on the screen is drawn by the text after the ``rows``-th newline from the end, which is the
    tail returned."""
    newlines = []
    cut = len(data)
    for _ in range(2 * rows):
        cut = data.rfind(b"\n", 0, cut)
        if cut <= 0 or data[cut - 1] != 0x0D:
            return None
        newlines.append(cut)
    checked = data[newlines[-1] + 1 :]
    if b"\x1b" in checked and b"\x1b" in _IN_ROW.sub(b"", checked):
        return None
    return data[newlines[rows - 1] + 1 :]


def _clip(data: bytes, clipped: bool) -> bytes:
    return _from_line_start(data) if clipped else data


def _from_line_start(data: bytes) -> bytes:
    """``data`` from just after its first newline (or its first ESC), so that replay starting
    at an arbitrary offset does not begin inside an escape sequence."""
    newline = data.find(b"\n")
    if newline != -1:
        return data[newline + 1 :]
    esc = data.find(b"\x1b")
    return data[esc:] if esc != -1 else data
