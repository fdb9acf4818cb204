"""A session's terminal for a browser: the live log as server-sent events, and its recording.

``follow`` streams the log from any byte offset and then follows it: each event is one page
of ``display_chunk`` (the bytes a person's terminal shows), base64-encoded with its offsets, so
xterm.js in the page draws exactly what a terminal attached to the session would. The browser
never holds more than its terminal's scrollback; earlier pages come from the server on demand
(a new stream from an earlier offset). A negative offset counts from the end and starts at the
next line there.

``replay_cast`` is the session's asciicast recording with each command's protocol line shown as
the command itself, for the asciinema player.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from sandbox.session.live_view import display_chunk

if TYPE_CHECKING:
    from sandbox.session.session import Session

PAGE_BYTES = 64 * 1024
WAIT_S = 5.0  # a wait for output in a worker thread; a keepalive comment goes out after each
HELD_BACK_S = 0.05  # a command line typed but not yet framed: look again this soon
LINE_SEARCH = 4096
REWRITE_MAX_BYTES = 64 * 1024 * 1024


def start_offset(session: Session, from_byte: int, *, align: bool = False) -> int:
    """``from_byte`` as an offset in the log: negative counts from the end; that one, and any
    with ``align``, moves to the start of its line (or of the next one, past a line longer than
    ``LINE_SEARCH``), so a view never starts inside an escape sequence and windows of the
    history join up. Without ``align`` a positive offset is taken as is (a page boundary)."""
    size = session.log.size
    if from_byte >= 0 and not align:
        return min(from_byte, size)
    start = max(0, min(size, size + from_byte if from_byte < 0 else from_byte))
    before = session.log.read(max(0, start - LINE_SEARCH), start)
    newline = before.rfind(b"\n")
    if newline >= 0 or start <= LINE_SEARCH:
        return start - len(before) + newline + 1  # the start of the line ``start`` is in
    after = session.log.read(start, min(size, start + LINE_SEARCH)).find(b"\n")
    return start + after + 1 if after >= 0 else start


def _page(start: int, nxt: int, data: bytes) -> dict[str, object]:
    return {"from": start, "next": nxt, "data": base64.b64encode(data).decode()}


def event(name: str, data: dict[str, object]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


async def follow(
    session: Session, offset: int, limiter: anyio.CapacityLimiter, stop: int | None = None
) -> AsyncIterator[bytes]:
    """Server-sent events: ``page`` events from ``offset`` on, then ``exit`` when the session
    has ended and everything was sent; with ``stop``, the pages up to there (a window of the
    history), then ``end``. Ends when the client goes away."""
    hello = {"from": offset, "rows": session.rows, "cols": session.cols}
    yield event("hello", {**hello, "size": session.log.size})
    while True:
        page = PAGE_BYTES if stop is None else max(0, min(PAGE_BYTES, stop - offset))
        data, nxt = await anyio.to_thread.run_sync(
            display_chunk, session, offset, page, limiter=limiter
        )
        if stop is not None and (nxt >= stop or nxt == offset):
            if nxt > offset:
                yield event("page", _page(offset, nxt, data))
            yield event("end", {"next": nxt})
            return
        if nxt > offset:
            yield event("page", _page(offset, nxt, data))
            offset = nxt
            continue
        if session.status != "running":  # and nothing more to show (a destroyed log reads empty)
            yield event("exit", {"next": offset})
            return
        if session.log.size > offset:  # held back: a command line is being framed
            await anyio.sleep(HELD_BACK_S)
            continue
        await anyio.to_thread.run_sync(
            session.wait_output, offset, WAIT_S, limiter=limiter, abandon_on_cancel=True
        )
        if session.log.size <= offset:
            yield b": keepalive\n\n"


def _display_events(session: Session, lines: Iterator[str]) -> Iterator[str]:
    """The recording's events with their output as the live view shows it: the output events
    joined are the log decoded, so each covers a range of the log, drawn through
    ``display_chunk``; what ends inside a command's line goes out with a later event."""
    shown = end = 0
    for line in lines:
        item = json.loads(line) if line.strip() else None
        if not (isinstance(item, list) and len(item) == 3 and item[1] == "o"):
            if line.strip():
                yield line.rstrip("\n")
            continue
        end += len(str(item[2]).encode("utf-8", "replace"))
        data, nxt = display_chunk(session, shown, end - shown)
        if nxt > shown:
            yield json.dumps([item[0], "o", data.decode("utf-8", "replace")])
            shown = nxt


def replay_cast(session: Session) -> str | None:
    """The recording as asciicast v2 text, or None when the session has none. (Blocking.)"""
    recording = session.recording
    if recording is None or not recording.path.exists():
        return None
    if recording.path.stat().st_size > REWRITE_MAX_BYTES:  # too big to redraw: as recorded
        return recording.path.read_text(encoding="utf-8", errors="replace")
    with recording.path.open(encoding="utf-8", errors="replace") as fh:
        header = fh.readline()
        events = _display_events(session, iter(fh.readline, ""))
        return header + "".join(e + "\n" for e in events)
