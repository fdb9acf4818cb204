"""The stdio wire: newline-delimited JSON-RPC on the process's stdin and stdout, on the event loop.

The SDK's transport reads and writes through ``anyio.wrap_file``: every line read and every
write and flush is a round trip to a worker thread, three thread hops per request that cost
more than the engine's own work for a short command. Here both ends are served by the event
loop: stdin is read when epoll says it is readable, and stdout is written in ``PIPE_BUF``
pieces when poll says the pipe has room, so a client that stops reading stalls only its own
replies, never the loop.

While serving, fd 0 reads the null device and fd 1 points at stderr (as the SDK does), so
children and stray prints never touch the wire; both are restored on exit. Where epoll cannot
watch stdin (a regular file), a daemon thread reads it instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import select
import threading
from collections.abc import AsyncIterator, Callable, Iterator

import anyio
import anyio.from_thread
import anyio.lowlevel

log = logging.getLogger(__name__)

_CHUNK = select.PIPE_BUF  # a blocking write of at most this much never waits once poll says POLLOUT
FINISH_LINE_S = 1.0  # a reply cut by shutdown: how long to wait for the client to take the rest


class WireWriter:
    """What the SDK's stdout writer needs (``write`` then ``flush``), written on the loop."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._poll = select.poll()
        self._poll.register(fd, select.POLLOUT)
        self._lock = anyio.Lock()  # the SDK's writer and the fast path: whole lines each

    async def write(self, text: str) -> None:
        rest = [memoryview(text.encode("utf-8"))]
        async with self._lock:
            try:
                await self._send(rest)
            except anyio.get_cancelled_exc_class():
                # Stopping mid-line would leave the client half a JSON message: finish the
                # line if the client reads within a moment.
                with anyio.CancelScope(shield=True), anyio.move_on_after(FINISH_LINE_S):
                    await self._send(rest)
                raise

    async def _send(self, rest: list[memoryview]) -> None:
        while rest[0]:
            if not self._poll.poll(0):
                await anyio.wait_writable(self._fd)
            written = os.write(self._fd, rest[0][:_CHUNK])
            rest[0] = rest[0][written:]

    async def flush(self) -> None:
        """Nothing is buffered: each write went to the file descriptor."""


@contextlib.contextmanager
def claimed_stdio() -> Iterator[tuple[int, int]]:
    """Private duplicates of stdin and stdout for the wire; fd 0 and 1 point elsewhere meanwhile.

    Yields ``(read_fd, write_fd)``. The duplicates are not closed: a reader thread may still
    block on the read end, and a recycled descriptor number would hand it someone else's data.
    """
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    _point(0, lambda: os.open(os.devnull, os.O_RDONLY))
    _point(1, _stderr_or_null)
    try:
        yield wire_in, wire_out
    finally:
        for fd, wire in ((1, wire_out), (0, wire_in)):
            with contextlib.suppress(OSError):
                os.dup2(wire, fd)


def _stderr_or_null() -> int:
    try:
        return os.dup(2)
    except OSError:  # no stderr: stray output goes nowhere rather than onto the wire
        return os.open(os.devnull, os.O_WRONLY)


def _point(fd: int, open_target: Callable[[], int]) -> None:
    try:
        target = open_target()
    except OSError:
        return
    try:
        os.dup2(target, fd)
    finally:
        os.close(target)


async def wire_lines(fd: int) -> AsyncIterator[str]:
    """Lines from ``fd`` (without their newline), read on the event loop until EOF or a read
    error (a client that went away)."""
    lines = _LineSplitter()
    while True:
        try:
            await anyio.wait_readable(fd)
        except OSError:  # epoll cannot watch it (a regular file): a thread reads instead
            async for text in _thread_lines(fd, lines.pending()):
                yield text
            return
        try:
            chunk = os.read(fd, 65536)
        except OSError as exc:  # e.g. a socketpair whose client died: that is EOF
            log.debug("stdin read failed: %s", exc)
            break
        if not chunk:
            break
        for line in lines.feed(chunk):
            yield line.decode("utf-8", "replace")
    last = lines.pending()
    if last.strip():
        yield last.decode("utf-8", "replace")


class _LineSplitter:
    """Splits a byte stream into lines, looking at each byte once (a long line costs linear
    time, not the square of its length, on the event loop)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        start = len(self._buf)
        self._buf += chunk
        out: list[bytes] = []
        begin = 0
        while (end := self._buf.find(b"\n", start)) >= 0:
            out.append(bytes(self._buf[begin:end]))
            begin = start = end + 1
        if begin:
            del self._buf[:begin]
        return out

    def pending(self) -> bytes:
        return bytes(self._buf)


async def _thread_lines(fd: int, pending: bytes) -> AsyncIterator[str]:
    """The fallback: a daemon thread reads ``fd``, so shutdown never waits for its input."""
    send, receive = anyio.create_memory_object_stream[str](64)
    token = anyio.lowlevel.current_token()

    def pump() -> None:
        lines = _LineSplitter()
        lines.feed(pending)
        try:
            while chunk := os.read(fd, 65536):
                for line in lines.feed(chunk):
                    anyio.from_thread.run(send.send, line.decode("utf-8", "replace"), token=token)
            rest = lines.pending()
            if rest.strip():
                anyio.from_thread.run(send.send, rest.decode("utf-8", "replace"), token=token)
        except Exception as exc:  # the loop is gone, or stdin broke
            log.debug("stdin reader stopped: %s", exc)
        finally:
            with contextlib.suppress(Exception):
                anyio.from_thread.run_sync(send.close, token=token)

    threading.Thread(target=pump, name="sandbox-stdin", daemon=True).start()
    async with receive:
        async for line in receive:
            yield line
