"""The stdio wire: lines read and replies written on the event loop, fd 0/1 claimed meanwhile."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import anyio
import pytest

from sandbox.stdio_wire import WireWriter, wire_lines

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


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


async def test_lines_from_a_regular_file_use_a_reader_thread(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b"one\ntwo\n\nthree")
    fd = os.open(path, os.O_RDONLY)
    try:
        with anyio.fail_after(5):
            assert await _collect(fd) == ["one", "two", "", "three"]
    finally:
        os.close(fd)


async def test_a_reply_larger_than_the_pipe_never_blocks_the_loop() -> None:
    r, w = os.pipe()
    message = "x" * (1 << 20) + "\n"  # 16 times a pipe's default capacity
    received = bytearray()

    def slow_reader() -> None:
        while chunk := os.read(r, 65536):
            received.extend(chunk)
            time.sleep(0.002)

    reader = threading.Thread(target=slow_reader)
    reader.start()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.001)
            ticks += 1

    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(ticker)
                writer = WireWriter(w)
                await writer.write(message)
                await writer.flush()
                tg.cancel_scope.cancel()
    finally:
        os.close(w)
        reader.join(10)
        os.close(r)
    assert received == message.encode()
    assert ticks > 5  # the loop ran other tasks while the pipe was full


def test_claimed_stdio_sends_stray_output_to_stderr_and_restores_stdout() -> None:
    script = textwrap.dedent(
        """
        import os, sys
        from sandbox.stdio_wire import claimed_stdio
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
