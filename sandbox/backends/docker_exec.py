"""Execs on a Docker-API engine: the attached TTY channel of a session's shell, and the
output of a control command read from the engine's multiplexed frames with a deadline."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any

import docker

from sandbox.backends.docker_errors import translate
from sandbox.errors import EngineError, EngineUnavailableError


def read_frames(response: Any, timeout_s: float) -> bytes:
    """The output of a non-TTY exec (the engine's multiplexed frames: 8-byte headers, then
    stdout or stderr bytes), read until the exec ends or ``timeout_s`` passes. An exec that
    never ends (a sandbox that died under it, a full pids limit) must not hang its caller."""
    fp = response.raw._fp.fp
    raw = fp.raw
    sock: socket.socket = getattr(raw, "_sock", raw)
    deadline = time.monotonic() + timeout_s
    data = bytearray()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise EngineError(
                f"a control command did not finish within {timeout_s:g} s",
                hint="The container may be stuck or gone; `sandbox doctor` checks the engine.",
            )
        sock.settimeout(remaining)
        try:
            chunk = fp.read1(65536)
        except TimeoutError:
            continue  # the deadline check above raises
        except (OSError, ValueError):
            break
        if not chunk:
            break
        data += chunk
    out = bytearray()
    view = memoryview(data)
    while len(view) >= 8:
        size = int.from_bytes(view[4:8], "big")
        out += view[8 : 8 + size]
        view = view[8 + size :]
    return bytes(out)


# CPython allocates a read's whole ``size`` before the socket is read, then shrinks it to what
# came. Past glibc's mmap threshold (128 KiB) that is an mmap, an mremap and an munmap for
# every chunk, however small (~25 us of a 60-byte read, on the round trip of every command).
# After a read that came short, the next one asks for at most this much (the heap serves it);
# a read that fills it means a stream is flowing, and the next one asks for all of ``size``.
QUIET_READ = 64 * 1024


class DockerExecChannel:
    """An attached ``exec`` with a TTY, read through the HTTP response's buffered reader.

    Reading ``response.raw._fp.fp`` with ``read1`` also returns bytes that arrived together
    with the upgrade headers (reading the raw socket would lose them).
    """

    def __init__(self, api: docker.APIClient, exec_id: str, response: Any) -> None:
        self._api = api
        self.exec_id = exec_id
        self._response = response
        fp = response.raw._fp.fp
        self._reader = fp
        raw = fp.raw
        self._sock: socket.socket = getattr(raw, "_sock", raw)
        self._sock.settimeout(None)
        self._write_lock = threading.Lock()
        self._closed = False
        self._flowing = False  # the last read filled QUIET_READ: ask for a whole ``size``

    def read(self, size: int = 65536) -> bytes:
        ask = size if self._flowing else min(size, QUIET_READ)
        try:
            data: bytes = self._reader.read1(ask)
        except (OSError, ValueError):
            return b""
        self._flowing = len(data) >= QUIET_READ
        return data

    def write(self, data: bytes) -> None:
        with self._write_lock:
            try:
                self._sock.sendall(data)
            except OSError as exc:
                raise EngineUnavailableError(
                    f"writing to the session's shell failed: {exc}"
                ) from exc

    def resize(self, rows: int, cols: int) -> None:
        try:
            self._api.exec_resize(self.exec_id, height=rows, width=cols)
        except Exception as exc:
            raise translate(exc, what="resize") from exc

    def exit_code(self) -> int | None:
        try:
            info = self._api.exec_inspect(self.exec_id)
        except Exception:
            return None
        if info.get("Running"):
            return None
        code = info.get("ExitCode")
        return int(code) if code is not None else None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(Exception):
            self._response.close()
