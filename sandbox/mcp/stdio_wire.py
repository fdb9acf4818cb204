"""The stdio wire: newline-delimited JSON-RPC on the process's stdin and stdout, on the event loop.

The SDK's transport reads and writes through ``anyio.wrap_file``: every line read and every
write and flush is a round trip to a worker thread, three thread hops per request that cost
more than the engine's own work for a short command. Here stdin is read on the event loop when
epoll says it is readable; stdout is written by the loop in ``PIPE_BUF`` pieces when poll says
the pipe has room, or by the worker thread that made a fast path answer (``WireWriter``), so a
client that stops reading stalls only its own replies, never the loop.

While serving, fd 0 reads the null device and fd 1 points at stderr (as the SDK does), so
children and stray prints never touch the wire; both are restored on exit. Where epoll cannot
watch stdin (a regular file), a daemon thread reads it instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import math
import os
import select
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

log = logging.getLogger(__name__)

_CHUNK = select.PIPE_BUF  # a blocking write of at most this much never waits once poll says POLLOUT
FINISH_LINE_S = 1.0  # a reply cut by shutdown: how long to wait for the client to take the rest
_POLL_MS = 100  # a worker waiting on a full pipe looks this often whether the writer closed


class WireWriter:
    """Whole lines onto the wire, from the event loop (``write``: what the SDK's stdout writer
    needs, with ``flush``) and from worker threads (``write_line``: the stdio fast path's
    answers, written by the thread that made them).

    One thread lock is held for each line, so lines never interleave. The loop never blocks:
    it writes ``PIPE_BUF`` pieces when poll says the pipe has room, and waits for a worker's
    line in a thread. A worker blocks on a full pipe (a client that does not read stalls its
    own replies), and after ``close`` gives up on a line the client does not take in time.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._poll = select.poll()  # used under ``_line`` only
        self._poll.register(fd, select.POLLOUT)
        self._lock = anyio.Lock()  # the loop's writers (the SDK's, and its cut-line wait)
        self._line = threading.Lock()  # whoever writes a line holds it for the whole line
        self._closed = threading.Event()

    async def write(self, text: str) -> None:
        rest = [memoryview(text.encode("utf-8"))]
        async with self._lock:
            if not self._line.acquire(blocking=False):  # a worker is writing its line
                await anyio.to_thread.run_sync(self._line.acquire)  # not abandoned: held after
            try:
                await self._send(rest)
            except anyio.get_cancelled_exc_class():
                # Stopping mid-line would leave the client half a JSON message: finish the
                # line if the client reads within a moment.
                with anyio.CancelScope(shield=True), anyio.move_on_after(FINISH_LINE_S):
                    await self._send(rest)
                raise
            finally:
                self._line.release()

    async def _send(self, rest: list[memoryview]) -> None:
        while rest[0]:
            if not self._poll.poll(0):
                await anyio.wait_writable(self._fd)
            written = os.write(self._fd, rest[0][:_CHUNK])
            rest[0] = rest[0][written:]

    async def flush(self) -> None:
        """Nothing is buffered: each write went to the file descriptor."""

    def write_line(self, text: str) -> bool:
        """From a worker thread: the whole line, or False when the writer closed and the client
        did not take the rest within ``FINISH_LINE_S``."""
        rest = memoryview(text.encode("utf-8"))
        with self._line:
            give_up = math.inf
            while rest:
                if not self._poll.poll(_POLL_MS):
                    if self._closed.is_set():
                        give_up = min(give_up, time.monotonic() + FINISH_LINE_S)
                        if time.monotonic() >= give_up:
                            return False
                    continue
                written = os.write(self._fd, rest[:_CHUNK])
                rest = rest[written:]
        return True

    def close(self) -> None:
        """Workers stop waiting on a client that does not read (after ``FINISH_LINE_S``)."""
        self._closed.set()


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


def _nobody(line: str) -> bool:
    return False


async def wire_lines(fd: int, take: Callable[[str], bool] = _nobody) -> AsyncIterator[str]:
    """Lines from ``fd`` (without their newline) until EOF or a read error (a client that went
    away), except those ``take`` takes.

    A reader callback on the event loop reads ``fd`` when epoll says it is readable and offers
    each line to ``take`` at once (the stdio fast path hands a call to its worker from there:
    no task step, no epoll registration per line); the lines it does not take are yielded in
    order, and reading pauses until they are (a slow consumer holds back the client).
    """
    loop = asyncio.get_running_loop()
    lines = _LineSplitter()
    waiting: deque[str] = deque()
    ready = asyncio.Event()
    ended = False

    def offer(raw: bytes) -> None:
        text = raw.decode("utf-8", "replace")
        if not take(text):
            waiting.append(text)

    def readable() -> None:
        nonlocal ended
        try:
            chunk = os.read(fd, 65536)
        except OSError as exc:  # e.g. a socketpair whose client died: that is EOF
            log.debug("stdin read failed: %s", exc)
            chunk = b""
        for line in lines.feed(chunk):
            offer(line)
        if not chunk:
            ended = True
            if (last := lines.pending()).strip():
                offer(last)
        if waiting or ended:
            loop.remove_reader(fd)
            ready.set()

    try:
        loop.add_reader(fd, readable)
    except OSError:  # epoll cannot watch it (a regular file): a thread reads instead
        async for text in _thread_lines(fd):
            if not take(text):
                yield text
        return
    try:
        while True:
            await ready.wait()
            ready.clear()
            while waiting:
                yield waiting.popleft()
            if ended:
                return
            loop.add_reader(fd, readable)
    finally:
        loop.remove_reader(fd)


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


async def _thread_lines(fd: int) -> AsyncIterator[str]:
    """The fallback: a daemon thread reads ``fd``, so shutdown never waits for its input."""
    send, receive = anyio.create_memory_object_stream[str](64)
    token = anyio.lowlevel.current_token()

    def pump() -> None:
        lines = _LineSplitter()
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
