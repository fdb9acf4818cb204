"""The seam between sessions and a container engine.

A ``Backend`` creates labelled containers, opens attached TTY execs in them (``ExecChannel``),
runs short control commands (``run``), and kills, restarts, inspects, lists and removes
containers. ``DockerBackend`` talks to a real engine; ``FakeBackend`` runs the same shell on a
host pty so unit tests stay fast and need no engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Mount:
    """A host directory (``source`` is an absolute path) or a named volume (a name)."""

    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class ContainerSpec:
    """Everything needed to start one session's container (DESIGN.md §6 profile)."""

    image: str
    name: str
    labels: dict[str, str]
    mounts: tuple[Mount, ...]
    command: tuple[str, ...]
    user: str  # the keepalive's user (PID 1's child)
    memory_mb: int
    cpus: float
    pids: int
    network: str  # "none" or a docker network name
    tmpfs: dict[str, str]
    read_only_root: bool = True
    fsize_bytes: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    runtime: str | None = None
    workdir: str = "/workspace"
    dns_options: tuple[str, ...] = ()  # resolv.conf options, e.g. ("timeout:1",)


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    output: bytes


@dataclass(frozen=True)
class ContainerState:
    id: str
    status: str  # docker's: created, running, paused, restarting, exited, dead
    exit_code: int | None
    oom_killed: bool
    labels: dict[str, str]
    name: str = ""
    created: str = ""

    @property
    def running(self) -> bool:
        return self.status in ("running", "paused", "restarting")


@dataclass(frozen=True)
class EngineDescription:
    name: str
    version: str
    api_version: str
    runtimes: tuple[str, ...]
    cgroup_version: str = ""
    os: str = ""


class ExecChannel(Protocol):
    """An attached exec with a TTY: a byte pipe both ways plus resize."""

    def read(self, size: int = 65536) -> bytes:
        """Block until some bytes arrive; ``b""`` at end of stream."""
        ...

    def write(self, data: bytes) -> None:
        """Write all of ``data`` (thread-safe)."""
        ...

    def resize(self, rows: int, cols: int) -> None: ...

    def exit_code(self) -> int | None:
        """The exec's exit code once it ended, else None."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class NetworkState:
    name: str
    labels: dict[str, str]
    containers: tuple[str, ...]  # ids of the containers attached to it


class NetworkControl(Protocol):
    """Engine networks and the calls a long-lived service container needs (the egress
    proxy); a backend without them (the fake one) has ``networks`` None."""

    def ensure_network(self, name: str, labels: dict[str, str], *, internal: bool) -> None:
        """Create the network unless it exists (``internal``: no route out of it)."""
        ...

    def remove_network(self, name: str) -> None:
        """Remove a network; no error if it is gone."""
        ...

    def network(self, name: str) -> NetworkState | None: ...

    def connect(self, container_id: str, network: str) -> None:
        """Attach a container to one more network (no error if it is attached already)."""
        ...

    def start(self, container_id: str) -> None: ...

    def follow_logs(self, container_id: str, since: int) -> Iterator[bytes]:
        """The container's stdout from ``since`` (epoch seconds) on, until it stops."""
        ...


class Backend(Protocol):
    """A container engine, reduced to what sessions need."""

    def create(self, spec: ContainerSpec) -> str:
        """Create and start a container; return its id."""
        ...

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
    ) -> ExecChannel:
        """Start ``argv`` attached (stdin and output). Without ``tty`` the output arrives in
        the engine's multiplexed framing: use that only for channels whose output is drained."""
        ...

    def run(
        self,
        container_id: str,
        argv: list[str],
        *,
        user: str,
        timeout_s: float = 10.0,
        env: dict[str, str] | None = None,
    ) -> RunResult:
        """Run a short command to completion (not attached, no TTY)."""
        ...

    def create_volume(self, name: str, labels: dict[str, str]) -> None:
        """Create a labelled named volume (kept across container restarts)."""
        ...

    def remove_volume(self, name: str) -> None:
        """Remove a named volume; no error if it is already gone."""
        ...

    def stop(self, container_id: str) -> None:
        """Stop a container, keeping it (and its volumes) for later."""
        ...

    def kill(self, container_id: str, signal: str = "KILL") -> None: ...

    def restart(self, container_id: str) -> None:
        """Kill and start the same container again (used when even exec fails)."""
        ...

    def inspect(self, container_id: str) -> ContainerState: ...

    def list_containers(self, labels: dict[str, str]) -> list[ContainerState]:
        """Containers (running or not) carrying all of ``labels``."""
        ...

    def remove(self, container_id: str) -> None:
        """Force-remove a container; no error if it is already gone."""
        ...

    def describe(self) -> EngineDescription: ...

    @property
    def isolated(self) -> bool:
        """Whether containers are real (their own pid namespace): a control command may then
        kill every process of the shell's user without touching the host's."""
        ...

    @property
    def sets_fsize_ulimit(self) -> bool:
        """Whether the engine caps a container's file size itself. Podman's compatible API
        cannot (see ``sandbox.backends.podman``): there a session's first process does."""
        ...

    @property
    def networks(self) -> NetworkControl | None:
        """Network control, where the engine has it (needed by egress allow-lists)."""
        ...

    def image_exists(self, image: str) -> bool: ...

    def build_image(
        self, context_dir: str, tags: list[str], on_line: Callable[[str], None]
    ) -> None:
        """Build an image from ``context_dir``, streaming progress lines to ``on_line``."""
        ...
