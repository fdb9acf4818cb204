"""A backend without an engine: each "container" is a directory, each exec a host process on a pty.

Unit tests use it to drive the real shell protocol (markers, keys, screen, escalation) in
milliseconds. It isolates nothing: never point it at untrusted commands. ``/workspace`` in a
workdir maps to the project's mount source.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import pty
import select
import signal as signal_mod
import struct
import subprocess
import termios
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.backends.base import (
    ContainerSpec,
    ContainerState,
    EngineDescription,
    NetworkControl,
    RunResult,
)
from sandbox.config import DEFAULT_IMAGE
from sandbox.errors import EngineUnavailableError, ImageNotFoundError, SessionNotFoundError


class FakeExecChannel:
    """A host process attached to a pty master.

    The reader owns the master fd and closes it itself: closing it under a reader blocked in
    ``os.read`` would let the next ``openpty`` reuse the number, and that stale reader would
    then steal another session's output. ``close`` only kills the process and flags the
    channel; the reader notices within ``_POLL_S`` and releases the fd."""

    _POLL_S = 0.1

    def __init__(self, proc: subprocess.Popen[bytes], master: int) -> None:
        self.proc = proc
        self._master = master
        self._write_lock = threading.Lock()
        self._closed = False
        self._released = False
        self._read_started = False

    def _release(self) -> None:
        with self._write_lock:
            if not self._released:
                self._released = True
                with contextlib.suppress(OSError):
                    os.close(self._master)

    def read(self, size: int = 65536) -> bytes:
        self._read_started = True
        while not self._closed:
            try:
                ready, _, _ = select.select([self._master], [], [], self._POLL_S)
            except (OSError, ValueError):
                break
            if not ready:
                continue
            try:
                data = os.read(self._master, size)
            except OSError:  # EIO once the slave side is gone
                break
            if not data:
                break
            return data
        self._release()
        return b""

    def write(self, data: bytes) -> None:
        with self._write_lock:
            if self._closed or self._released:
                raise EngineUnavailableError("writing to the shell failed: the channel is closed")
            view = memoryview(data)
            while view:
                try:
                    n = os.write(self._master, view)
                except OSError as exc:
                    raise EngineUnavailableError(f"writing to the shell failed: {exc}") from exc
                view = view[n:]

    def resize(self, rows: int, cols: int) -> None:
        if self._closed or self._released:
            return
        with contextlib.suppress(OSError):
            fcntl.ioctl(self._master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            os.killpg(os.getpgid(self.proc.pid), signal_mod.SIGWINCH)

    def exit_code(self) -> int | None:
        code = self.proc.poll()
        if code is None:
            return None
        return 128 - code if code < 0 else code

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal_mod.SIGKILL)
        if not self._read_started:  # no reader will come to release the fd
            self._release()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=5)


@dataclass
class _FakeContainer:
    spec: ContainerSpec
    id: str
    status: str = "running"
    exit_code: int | None = None
    channels: list[FakeExecChannel] = field(default_factory=list)


class FakeBackend:
    """Implements ``Backend`` with host processes; see the module docstring."""

    def __init__(self, *, images: tuple[str, ...] = (DEFAULT_IMAGE,)) -> None:
        self.images = set(images)
        self.containers: dict[str, _FakeContainer] = {}
        self.runs: list[list[str]] = []
        self.volumes: dict[str, dict[str, str]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.available = True

    def _check(self) -> None:
        if not self.available:
            raise EngineUnavailableError("the fake engine is switched off")

    def _get(self, container_id: str) -> _FakeContainer:
        self._check()
        try:
            return self.containers[container_id]
        except KeyError:
            raise SessionNotFoundError(f"no fake container {container_id}") from None

    def create(self, spec: ContainerSpec) -> str:
        self._check()
        if spec.image not in self.images:
            raise ImageNotFoundError(f"image {spec.image!r} is not present")
        with self._lock:
            cid = f"fake{next(self._ids):060d}"
            self.containers[cid] = _FakeContainer(spec=spec, id=cid)
        return cid

    def _host_dir(self, container: _FakeContainer, workdir: str) -> str:
        for mount in container.spec.mounts:
            if workdir == mount.target or workdir.startswith(mount.target + "/"):
                return mount.source + workdir[len(mount.target) :]
        return str(Path.cwd())

    def exec_attach(
        self,
        container_id: str,
        argv: list[str],
        *,
        user: str,
        env: dict[str, str],
        workdir: str,
        rows: int,
        cols: int,
        tty: bool = True,
    ) -> FakeExecChannel:
        container = self._get(container_id)
        if container.status != "running":
            raise SessionNotFoundError(f"fake container {container_id} is not running")
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        full_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "TERM": "xterm-256color",
            "LANG": "C.UTF-8",
            "HOME": self._host_dir(container, workdir),
        }
        full_env.update(env)
        proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=self._host_dir(container, workdir),
            env=full_env,
            start_new_session=True,
            preexec_fn=_set_controlling_tty,
            close_fds=True,
        )
        os.close(slave)
        channel = FakeExecChannel(proc, master)
        container.channels.append(channel)
        return channel

    def run(
        self,
        container_id: str,
        argv: list[str],
        *,
        user: str,
        timeout_s: float = 10.0,
        env: dict[str, str] | None = None,
    ) -> RunResult:
        container = self._get(container_id)
        if container.status != "running":
            raise SessionNotFoundError(f"fake container {container_id} is not running")
        self.runs.append(list(argv))
        try:
            done = subprocess.run(
                argv, capture_output=True, timeout=timeout_s, check=False, stdin=subprocess.DEVNULL
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return RunResult(exit_code=126, output=str(exc).encode())
        return RunResult(exit_code=done.returncode, output=done.stdout + done.stderr)

    def kill(self, container_id: str, signal: str = "KILL") -> None:
        container = self._get(container_id)
        for channel in container.channels:
            channel.close()
        container.channels.clear()
        container.status = "exited"
        container.exit_code = 137

    def create_volume(self, name: str, labels: dict[str, str]) -> None:
        self._check()
        self.volumes[name] = dict(labels)

    def remove_volume(self, name: str) -> None:
        self._check()
        self.volumes.pop(name, None)

    def stop(self, container_id: str) -> None:
        self.kill(container_id)

    def restart(self, container_id: str) -> None:
        self.kill(container_id)
        self.containers[container_id].status = "running"
        self.containers[container_id].exit_code = None

    def inspect(self, container_id: str) -> ContainerState:
        c = self._get(container_id)
        return ContainerState(
            id=c.id,
            status=c.status,
            exit_code=c.exit_code,
            oom_killed=False,
            labels=dict(c.spec.labels),
            name=c.spec.name,
        )

    def list_containers(self, labels: dict[str, str]) -> list[ContainerState]:
        self._check()
        return [
            self.inspect(c.id)
            for c in list(self.containers.values())
            if all(c.spec.labels.get(k) == v for k, v in labels.items())
        ]

    def remove(self, container_id: str) -> None:
        self._check()
        container = self.containers.pop(container_id, None)
        if container is not None:
            for channel in container.channels:
                channel.close()

    @property
    def isolated(self) -> bool:
        return False

    @property
    def sets_fsize_ulimit(self) -> bool:
        return True

    @property
    def networks(self) -> NetworkControl | None:
        return None  # host processes: nothing to put on a network

    def describe(self) -> EngineDescription:
        self._check()
        return EngineDescription(name="Fake", version="0", api_version="0", runtimes=("fake",))

    def image_exists(self, image: str) -> bool:
        self._check()
        return image in self.images

    def build_image(
        self, context_dir: str, tags: list[str], on_line: Callable[[str], None]
    ) -> None:
        self._check()
        on_line(f"fake build of {context_dir}")
        self.images.update(tags)


def _set_controlling_tty() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError):
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
