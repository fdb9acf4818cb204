"""The host floors of bulk output: the same command with no Docker at all.

- ``pty_ms``: the command's stdout is a fresh pty's slave (output processing as a terminal
  has it: ONLCR on), the bench reads the master in 1 MiB reads as fast as it can. This is what
  any terminal-based tool pays at least: a program that sees a terminal line-buffers its stdio
  (``base64`` then makes one write per 77-byte line), and the kernel's pty moves each write.
- ``pipe_ms``: the command's stdout is a pipe (what one-shot execs give a program: it then
  writes in 4 KiB+ blocks), read the same way.

Both return ``(milliseconds, bytes read)``; the host has no CPU limit, unlike the containers.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import subprocess
import termios
import time

READ = 1024 * 1024


def pty_ms(command: str, *, rows: int = 24, cols: int = 80) -> tuple[float, int]:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(
            ["sh", "-c", command],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
    finally:
        os.close(slave)
    total = 0
    try:
        while True:
            try:
                data = os.read(master, READ)
            except OSError as exc:  # EIO: every slave fd is closed
                if exc.errno != errno.EIO:
                    raise
                break
            if not data:
                break
            total += len(data)
    finally:
        os.close(master)
    proc.wait()
    return (time.perf_counter() - t0) * 1000, total


def pipe_ms(command: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(["sh", "-c", command], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    total = 0
    while data := os.read(fd, READ):
        total += len(data)
    proc.stdout.close()
    proc.wait()
    return (time.perf_counter() - t0) * 1000, total
