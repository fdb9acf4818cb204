"""The stdio wire: lines read and replies written on the event loop, fd 0/1 claimed meanwhile."""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import subprocess
import sys
import termios
import textwrap
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from sandbox.mcp import stdio_wire
from sandbox.mcp.stdio_wire import WireWriter, wire_lines

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _until_full(fd: int) -> None:
    """Until the pipe read by ``fd`` holds 64 KiB (its writer waits for room)."""
    while struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0] < 65536:
        time.sleep(0.01)


async def _collect(fd: int) -> list[str]:
    return [line async for line in wire_lines(fd)]


async def test_lines_from_a_pipe_keep_a_last_line_without_newline() -> None:
    r, w = os.pipe()
    try:

        def feed() -> None:
            os.write(w, b'{"a": 1}\n{"b":')
            time.sleep(0.05)  # a line split across two reads
            os.write(w, ' "é"}\npartial'.encode())
            os.close(w)

        threading.Thread(target=feed).start()
        with anyio.fail_after(5):
            assert await _collect(r) == ['{"a": 1}', '{"b": "é"}', "partial"]
    finally:
        os.close(r)


async def test_lines_from_a_regular_file_use_a_reader_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b"one\ntwo\n\nthree")
    fallbacks: list[int] = []
    thread_lines = stdio_wire._thread_lines

    def counting(fd: int) -> AsyncIterator[str]:
        fallbacks.append(fd)
        return thread_lines(fd)

    monkeypatch.setattr(stdio_wire, "_thread_lines", counting)
    fd = os.open(path, os.O_RDONLY)
    try:
        with anyio.fail_after(5):
            assert await _collect(fd) == ["one", "two", "", "three"]
    finally:
        os.close(fd)
    assert fallbacks == [fd]  # epoll cannot watch a regular file


async def test_a_long_line_arrives_whole() -> None:
    r, w = os.pipe()
    line = b"x" * (8 << 20)

    def feed() -> None:
        view = memoryview(line + b"\nnext\n")
        while view:
            view = view[os.write(w, view[:65536]) :]
        os.close(w)

    threading.Thread(target=feed).start()
    try:
        with anyio.fail_after(30):
            lines = await _collect(r)
    finally:
        os.close(r)
    assert [len(x) for x in lines] == [len(line), 4]


async def test_a_client_gone_with_replies_unread_is_end_of_input() -> None:
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(b"first\n")
        ours.sendall(b"a reply the client never reads\n")
        theirs.close()  # with unread data: our next read fails with ECONNRESET
        with anyio.fail_after(5):
            assert await _collect(ours.fileno()) == ["first"]
    finally:
        ours.close()


async def test_a_reply_cut_by_shutdown_is_still_finished_as_a_line() -> None:
    r, w = os.pipe()
    message = "y" * (256 << 10) + "\n"  # more than the pipe holds
    received = bytearray()

    def late_reader() -> None:
        time.sleep(0.4)  # after the cancel: the client reads again a moment later
        while chunk := os.read(r, 65536):
            received.extend(chunk)

    reader = threading.Thread(target=late_reader)
    reader.start()
    try:
        with anyio.move_on_after(0.2) as scope:
            await WireWriter(w).write(message)
        assert scope.cancelled_caught
    finally:
        os.close(w)
        reader.join(10)
        os.close(r)
    assert received == message.encode()  # the whole line, not the part before the cancel


async def test_a_cut_reply_gives_up_when_the_client_never_reads() -> None:
    r, w = os.pipe()
    try:
        t0 = time.monotonic()
        with anyio.fail_after(10), anyio.move_on_after(0.2):
            await WireWriter(w).write("z" * (256 << 10) + "\n")
        assert time.monotonic() - t0 < 0.2 + stdio_wire.FINISH_LINE_S + 2
    finally:
        os.close(w)
        os.close(r)


def test_claimed_stdio_sends_stray_output_to_stderr_and_restores_stdout() -> None:
    script = textwrap.dedent(
        """
        import os, sys
        from sandbox.mcp.stdio_wire import claimed_stdio
        with claimed_stdio() as (wire_in, wire_out):
            print("stray print", flush=True)
            os.system("echo stray child")
            os.write(wire_out, b"wire\\n")
            assert os.read(0, 10) == b""  # fd 0 reads the null device
            assert os.read(wire_in, 100) == b"from the client\\n"
        print("after", flush=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=b"from the client\n",
        capture_output=True,
        timeout=30,
        check=True,
    )
    assert done.stdout == b"wire\nafter\n"
    assert b"stray print" in done.stderr
    assert b"stray child" in done.stderr


async def test_lines_from_a_worker_and_the_loop_never_interleave() -> None:
    r, w = os.pipe()
    writer = WireWriter(w)
    big = "w" * (256 << 10) + "\n"  # more than the pipe holds: the worker waits for room
    received = bytearray()

    def slow_reader() -> None:
        time.sleep(0.2)  # the worker holds the line, the loop's write waits for it
        while chunk := os.read(r, 65536):
            received.extend(chunk)

    reader = threading.Thread(target=slow_reader)
    reader.start()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, writer.write_line, big)
            with anyio.fail_after(10):
                await anyio.to_thread.run_sync(_until_full, r)  # the worker holds its line
                await writer.write("from the loop\n")
    finally:
        os.close(w)
        reader.join(10)
        os.close(r)
    assert received.decode().split("\n") == [big[:-1], "from the loop", ""]


def test_a_worker_gives_up_on_a_client_that_never_reads_once_closed() -> None:
    r, w = os.pipe()
    writer = WireWriter(w)
    try:
        done: list[bool] = []
        worker = threading.Thread(target=lambda: done.append(writer.write_line("x" * (256 << 10))))
        worker.start()
        time.sleep(0.2)
        assert worker.is_alive()  # a full pipe: it waits for the client
        t0 = time.monotonic()
        writer.close()
        worker.join(stdio_wire.FINISH_LINE_S + 5)
        assert done == [False]
        assert time.monotonic() - t0 >= stdio_wire.FINISH_LINE_S - 0.2
    finally:
        os.close(w)
        os.close(r)


async def test_lines_taken_as_they_arrive_are_not_yielded_and_the_rest_keep_their_order() -> None:
    r, w = os.pipe()
    taken: list[str] = []

    def take(line: str) -> bool:
        if line.startswith("t"):
            taken.append(line)
            return True
        return False

    try:
        os.write(w, b"one\ntwo\nthree\nfour\n")
        lines = wire_lines(r, take)
        with anyio.fail_after(5):
            assert await lines.__anext__() == "one"
            assert taken == ["two", "three"]  # taken from the same read, before "one" is used
            os.write(w, b"five\nten")
            os.close(w)
            w = -1
            assert [line async for line in lines] == ["four", "five"]
        assert taken == ["two", "three", "ten"]
    finally:
        if w >= 0:
            os.close(w)
        os.close(r)
