"""The terminal as a person watches it: the raw log, page by page, from any byte offset.

``display_chunk`` returns the log's bytes from an offset, ready for a terminal emulator in a
browser: each command's protocol line (``__sb_s NONCE; eval $'...'``) is shown as the command
itself (as the screen view shows it), only escape sequences that draw are kept
(``sanitize_terminal``: no titles, clipboard writes or queries), and a page never ends inside
an escape sequence, a UTF-8 character or a protocol line, so the next page starts cleanly at
the returned offset.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sandbox.terminal.transcript import complete_prefix, sanitize_terminal

if TYPE_CHECKING:
    from sandbox.session.session import Session

ECHO_WAIT_S = 2.0  # a typed command's line is held back this long, until its start marker


def settled_end(session: Session, start: int, stop: int) -> int:
    """Where a page from ``start`` may end, at most ``stop``: never inside a protocol line (nor
    in one whose start marker has not come yet, for up to ``ECHO_WAIT_S``)."""
    link = session.link
    with link.cond:
        p = link.tracker.pending
        if (
            p is not None
            and p.start is None
            and not p.finished
            and time.monotonic() - p.sent_at < ECHO_WAIT_S
            and start <= p.sent_offset < stop
        ):
            stop = p.sent_offset
    size = session.log.size
    for begin, end in session.display.echo_ranges():
        if start <= begin < stop < end:
            # a line longer than a page is shown whole once it is all there
            stop = begin if begin > start or end > size else end
    return stop


def display_chunk(session: Session, start: int, max_bytes: int) -> tuple[bytes, int]:
    """Up to ``max_bytes`` of the log from ``start`` as a person's terminal shows them, and
    the offset the next page starts at (== ``start`` when nothing whole is there yet)."""
    size = session.log.size
    start = max(0, min(start, size))
    while True:
        stop = settled_end(session, start, min(size, start + max_bytes))
        raw = session.log.read(start, stop)
        whole = complete_prefix(raw)
        if whole > 0 or not raw:
            break
        if stop < start + max_bytes:  # the rest of a sequence has not come yet
            return b"", start
        max_bytes *= 2  # one sequence is longer than a page: take it whole
    stop = start + whole
    shown = session.display.display_read(start, stop)
    return sanitize_terminal(shown), stop
