"""The floors: the same work done with nothing of ours in the way.

- ``start_floor_container``: ``docker run -d`` of the session image with the profile the engine
  uses (same limits, tmpfs, read-only root, init, user), labelled with the run's labels.
- ``RawShell``: our own TTY exec (docker-py ``exec_create(tty=True, stdin=True)`` +
  ``exec_start(socket=True)``) running ``bash --norc``. A line ``CMD; printf '\\033]777;x;%s\\a'
  N`` is written to the raw socket and timed until the marker comes back: the cheapest possible
  marker round trip, and (counting bytes) the cheapest way to read a command's output.
- ``docker_exec_cli``: ``docker exec CID true`` via the CLI, what people use without us.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import docker
from docker.types import Ulimit

from bench.env import BenchEnv
from sandbox.backends.podman import host_tmpfs, is_podman
from sandbox.config import SANDBOX_UID, SESSION_HOME, WORKSPACE, SandboxConfig

SHELL_USER = f"{SANDBOX_UID}:{SANDBOX_UID}"


def start_floor_container(env: BenchEnv, project: Path, config: SandboxConfig) -> str:
    """``docker run -d`` with the engine's container profile; returns the container id."""
    api = env.api
    c = config
    fsize = c.fsize_mb << 20
    # as the backend does it: Podman gets no ulimit (it would raise the others past the host's)
    podman = is_podman(api.version())
    ulimits = None if podman else [Ulimit(name="fsize", soft=fsize, hard=fsize)]
    host_config = api.create_host_config(
        binds={str(project): {"bind": WORKSPACE, "mode": "rw"}},
        init=True,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges:true"],
        pids_limit=c.pids,
        mem_limit=f"{c.memory_mb}m",
        memswap_limit=f"{c.memory_mb}m",
        nano_cpus=int(c.cpus * 1e9),
        network_mode="none",
        read_only=True,
        tmpfs=(host_tmpfs if podman else dict)(
            {
                "/tmp": f"rw,nosuid,nodev,size={c.tmp_mb}m,mode=1777",
                "/var/tmp": "rw,nosuid,nodev,size=64m,mode=1777",
                SESSION_HOME: f"rw,nosuid,nodev,size={c.home_mb}m,uid={SANDBOX_UID},"
                f"gid={SANDBOX_UID},mode=0755",
                "/run": "rw,nosuid,nodev,noexec,size=16m,mode=0755",
            }
        ),
        ulimits=ulimits,
    )
    created = api.create_container(
        image=c.image,
        command=["sleep", str(c.max_lifetime_s)],
        labels={**env.labels, "sandbox.bench": "floor"},
        user="65534:65534",
        environment={"HOME": SESSION_HOME, "LANG": "C.UTF-8"},
        working_dir=WORKSPACE,
        host_config=host_config,
        network_disabled=True,
        stop_signal="SIGKILL",
    )
    cid: str = created["Id"]
    api.start(cid)
    return cid


def remove_container(env: BenchEnv, cid: str) -> None:
    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
        env.api.remove_container(cid, force=True, v=True)


def shared_floor_container(env: BenchEnv) -> str:
    """One idle floor container per run, for the figures that only need a shell in one."""

    def make() -> str:
        return start_floor_container(env, env.project("floor"), env.config())

    return env.shared("floor-container", make)


class RawShell:
    """``bash --norc`` on a bare TTY exec socket, driven with printf markers."""

    def __init__(self, api: docker.APIClient, cid: str, *, cols: int = 80, rows: int = 24) -> None:
        created = api.exec_create(
            cid,
            ["bash", "--norc", "--noprofile"],
            stdin=True,
            tty=True,
            user=SHELL_USER,
            environment={"HOME": SESSION_HOME, "TERM": "xterm-256color", "PS1": "$ "},
            workdir=WORKSPACE,
        )
        self.exec_id: str = created["Id"]
        self._io: Any = api.exec_start(self.exec_id, socket=True, tty=True)
        self.sock: socket.socket = self._io._sock
        self.sock.settimeout(600)
        with contextlib.suppress(Exception):
            api.exec_resize(self.exec_id, height=rows, width=cols)
        self._n = 0

    def send(self, prefix: str = "") -> bytes:
        """Type ``PREFIX printf MARKER`` (Enter); return the marker that will come back."""
        self._n += 1
        line = f"{prefix}printf '\\033]777;x;%s\\a' {self._n}\r"
        self.sock.sendall(line.encode())
        return b"\x1b]777;x;%d\x07" % self._n

    def wait(self, token: bytes) -> int:
        """Read until ``token`` arrives; return how many bytes were read."""
        total = 0
        tail = b""
        keep = len(token) - 1
        recv = self.sock.recv
        while True:
            data = recv(65536)
            if not data:
                raise EOFError("the raw shell's exec socket closed")
            total += len(data)
            at = data.find(token)
            if at < 0 and tail:
                window = tail + data[:keep]
                at = window.find(token)
            if at >= 0:
                return total
            tail = data[-keep:] if len(data) >= keep else (tail + data)[-keep:]

    def round_trip(self, prefix: str = "") -> float:
        """Seconds from writing ``PREFIX printf MARKER`` until the marker is read back."""
        t0 = time.perf_counter()
        self.wait(self.send(prefix))
        return time.perf_counter() - t0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(b"exit\r")
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._io.close()


def docker_exec_cli(cid: str, n: int) -> list[float]:
    """Times (ms) of ``docker exec CID true`` via the CLI, after one warm-up call."""
    subprocess.run(["docker", "exec", cid, "true"], check=True, capture_output=True)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(["docker", "exec", cid, "true"], check=True, capture_output=True)
        out.append((time.perf_counter() - t0) * 1000)
    return out
