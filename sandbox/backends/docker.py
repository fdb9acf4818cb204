"""The Docker (and Podman-compatible) engine backend, over docker-py.

Docker's exceptions are translated to ``SandboxError``s in exactly one place, ``translate``.
Idempotent control-plane calls (inspect, list, remove, info) are retried with tenacity on
connection errors and 5xx; exec writes and container creation never are.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import docker
import docker.errors
import requests.exceptions
from docker.types import Ulimit
from tenacity import (
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from sandbox.backends import podman as podman_dialect
from sandbox.backends.base import (
    ContainerSpec,
    ContainerState,
    EngineDescription,
    NetworkControl,
    RunResult,
)
from sandbox.errors import (
    EngineError,
    EngineUnavailableError,
    ImageNotFoundError,
    InternalError,
    InvalidArgumentError,
    SandboxError,
    SessionNotFoundError,
)

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

# Detach keys nobody types: the default ctrl-p,ctrl-q would detach and kill the exec.
DETACH_KEYS = "ctrl-^,ctrl-_,ctrl-^,ctrl-_,ctrl-^"


def translate(exc: BaseException, *, what: str = "") -> SandboxError:
    """The one place where docker / requests errors become ``SandboxError``s."""
    prefix = f"{what}: " if what else ""
    if isinstance(exc, SandboxError):
        return exc
    if isinstance(exc, docker.errors.ImageNotFound):
        return ImageNotFoundError(f"{prefix}image not found: {_explain(exc)}")
    if isinstance(exc, docker.errors.NotFound):
        return SessionNotFoundError(f"{prefix}container not found: {_explain(exc)}")
    if isinstance(exc, docker.errors.APIError):
        status = exc.status_code or 0
        if status == 409 and "is not running" in _explain(exc):
            return SessionNotFoundError(f"{prefix}container is not running: {_explain(exc)}")
        if 400 <= status < 500:
            return InvalidArgumentError(f"{prefix}the engine refused: {_explain(exc)}")
        return EngineUnavailableError(
            f"{prefix}engine error {status}: {_explain(exc)}", hint=refusal_hint(_explain(exc))
        )
    if isinstance(
        exc,
        requests.exceptions.ConnectionError
        | requests.exceptions.Timeout
        | ConnectionError
        | socket.timeout
        | docker.errors.DockerException,
    ):
        return EngineUnavailableError(f"{prefix}the container engine does not answer: {exc}")
    return InternalError(f"{prefix}{type(exc).__name__}: {exc}")


def refusal_hint(explanation: str) -> str:
    """What to do when the engine answered but could not run the container (it is up: the
    connection is not the problem)."""
    text = explanation.lower()
    if "rlimit" in text:
        return (
            "The engine's default ulimits exceed this machine's hard limits (Podman: its "
            "defaults are above `ulimit -Hn`). Set default_ulimits in "
            '/etc/containers/containers.conf, e.g. ["nofile=20000:20000", "nproc=4096:4096"] '
            "with values at or below `ulimit -Hn` / `ulimit -Hu`, then restart the Podman "
            "service; `sandbox doctor` checks it."
        )
    if "catatonit" in text or "init binary" in text or "podman-init" in text:
        return (
            "Podman needs catatonit for a container's init (sessions run with --init): install "
            "it (Debian/Ubuntu: apt-get install catatonit; Fedora: dnf install catatonit)."
        )
    return (
        "The engine answered but could not run the container; its message above says why. "
        "`sandbox doctor` starts a container with the sessions' exact options and names the fix."
    )


def _explain(exc: docker.errors.APIError) -> str:
    return str(exc.explanation or exc)


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, docker.errors.APIError):
        return (exc.status_code or 0) >= 500
    return isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout)


_retry = retry(
    retry=retry_if_exception(_transient),
    stop=stop_after_attempt(4),
    wait=wait_exponential(multiplier=0.1, max=1.0),
    reraise=True,
)


def _translated(what: str) -> Callable[[Callable[P, T]], Callable[P, T]]:
    def deco(fn: Callable[P, T]) -> Callable[P, T]:
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            try:
                return fn(*args, **kwargs)
            except SandboxError:
                raise
            except Exception as exc:
                raise translate(exc, what=what) from exc

        wrapper.__name__ = fn.__name__
        wrapper.__doc__ = fn.__doc__
        return wrapper

    return deco


def _read_frames(response: Any, timeout_s: float) -> bytes:
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

    def read(self, size: int = 65536) -> bytes:
        try:
            data: bytes = self._reader.read1(size)
        except (OSError, ValueError):
            return b""
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


class DockerBackend:
    """Containers on a Docker-API engine (Docker Engine, Docker Desktop, Podman)."""

    def __init__(self, client: docker.DockerClient | None = None, *, lazy: bool = False) -> None:
        """Connect to the engine of the environment (``DOCKER_HOST``) unless given ``client``.

        ``lazy``: connect on first use instead, and again on each use until it answers, so an
        MCP server started before the engine runs answers ENGINE_UNAVAILABLE with the fix (and
        works once the engine is up) instead of exiting where its client cannot see why."""
        self._client = client
        self._connecting = threading.Lock()
        self._podman: bool | None = None
        self._seccomp: tuple[Path | None] | None = None
        if client is None and not lazy:
            self._connect()

    def _connect(self) -> docker.DockerClient:
        with self._connecting:
            if self._client is None:
                try:
                    self._client = docker.from_env(timeout=60)
                except Exception as exc:
                    raise translate(exc, what="connecting to the engine") from exc
            return self._client

    @property
    def client(self) -> docker.DockerClient:
        return self._client if self._client is not None else self._connect()

    @property
    def api(self) -> docker.APIClient:
        return self.client.api

    # -- containers ---------------------------------------------------------------------
    def _security_opt(self) -> list[str]:
        """no-new-privileges, and on Podman a seccomp profile that refuses user namespaces as
        Docker's default does (Podman's own default lets an agent become root in one)."""
        options = ["no-new-privileges:true"]
        if not self.is_podman:
            return options
        if self._seccomp is None:
            local = str(self.api.base_url).startswith("http+docker://localhost")
            path = podman_dialect.seccomp_profile(local)
            if path is None:
                log.warning(
                    "Podman's default seccomp profile lets sessions create user namespaces, and "
                    "it is not on this host to tighten (a remote engine?); sessions keep it"
                )
            self._seccomp = (path,)
        if self._seccomp[0] is not None:
            options.append(f"seccomp={self._seccomp[0]}")
        return options

    @_translated("creating the container")
    def create(self, spec: ContainerSpec) -> str:
        host_config = self.api.create_host_config(
            binds={
                m.source: {"bind": m.target, "mode": "ro" if m.read_only else "rw"}
                for m in spec.mounts
            },
            init=True,
            cap_drop=["ALL"],
            security_opt=self._security_opt(),
            pids_limit=spec.pids,
            mem_limit=f"{spec.memory_mb}m",
            memswap_limit=f"{spec.memory_mb}m",
            nano_cpus=int(spec.cpus * 1e9),
            network_mode=spec.network,
            read_only=spec.read_only_root,
            tmpfs=podman_dialect.host_tmpfs(spec.tmpfs) if self.is_podman else spec.tmpfs,
            # Podman's compat API, given any ulimit, sets the others to its own maxima, which
            # may exceed the host's hard limits ("error setting rlimit type 7"): there the
            # shell caps its file size itself (SHELL_ARGV) and the engine keeps its defaults.
            ulimits=(
                [Ulimit(name="fsize", soft=spec.fsize_bytes, hard=spec.fsize_bytes)]
                if spec.fsize_bytes and self.sets_fsize_ulimit
                else None
            ),
            runtime=spec.runtime,
            dns_opt=list(spec.dns_options) or None,
            auto_remove=False,
        )
        try:
            created = self.api.create_container(
                image=spec.image,
                command=list(spec.command),
                name=spec.name,
                labels=spec.labels,
                user=spec.user,
                environment=spec.env,
                working_dir=spec.workdir,
                host_config=host_config,
                network_disabled=spec.network == "none",
                stop_signal="SIGKILL",
            )
        except docker.errors.ImageNotFound as exc:
            raise ImageNotFoundError(
                f"image {spec.image!r} is not present on the engine",
                hint="Build it with `sandbox image build` (or pass an image that exists locally).",
            ) from exc
        cid: str = created["Id"]
        try:
            self.api.start(cid)
        except Exception:
            with contextlib.suppress(Exception):
                self.api.remove_container(cid, force=True)
            raise
        return cid

    @_translated("opening the shell")
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
    ) -> DockerExecChannel:
        created = self.api.exec_create(
            container_id,
            argv,
            stdin=True,
            tty=tty,
            user=user,
            environment=env,
            workdir=workdir,
            detach_keys=DETACH_KEYS,
        )
        exec_id: str = created["Id"]
        response = self.api._post_json(
            self.api._url("/exec/{0}/start", exec_id),
            headers={"Connection": "Upgrade", "Upgrade": "tcp"},
            data={"Tty": tty, "Detach": False},
            stream=True,
        )
        self.api._raise_for_status(response)
        channel = DockerExecChannel(self.api, exec_id, response)
        if tty:
            with contextlib.suppress(SandboxError):
                channel.resize(rows, cols)
        return channel

    @_translated("running a control command")
    def run(
        self,
        container_id: str,
        argv: list[str],
        *,
        user: str,
        timeout_s: float = 10.0,
        env: dict[str, str] | None = None,
    ) -> RunResult:
        created = self.api.exec_create(
            container_id, argv, stdout=True, stderr=True, user=user, environment=env
        )
        response = self.api._post_json(
            self.api._url("/exec/{0}/start", created["Id"]),
            headers={"Connection": "Upgrade", "Upgrade": "tcp"},
            data={"Tty": False, "Detach": False},
            stream=True,
        )
        self.api._raise_for_status(response)
        try:
            output = _read_frames(response, timeout_s)
        finally:
            with contextlib.suppress(Exception):
                response.close()
        info = self.api.exec_inspect(created["Id"])
        code = info.get("ExitCode")
        return RunResult(exit_code=int(code) if code is not None else -1, output=output)

    @_translated("creating a volume")
    def create_volume(self, name: str, labels: dict[str, str]) -> None:
        self.api.create_volume(name=name, labels=labels)

    @_translated("removing a volume")
    @_retry
    def remove_volume(self, name: str) -> None:
        try:
            self.api.remove_volume(name, force=True)
        except docker.errors.NotFound:
            return

    @_translated("stopping the container")
    def stop(self, container_id: str) -> None:
        try:
            self.api.stop(container_id, timeout=2)
        except docker.errors.NotFound:
            return

    @_translated("killing the container")
    def kill(self, container_id: str, signal: str = "KILL") -> None:
        try:
            self.api.kill(container_id, signal=signal)
        except docker.errors.APIError as exc:
            if exc.status_code in (404, 409):  # gone or not running: nothing to kill
                return
            raise

    @_translated("restarting the container")
    def restart(self, container_id: str) -> None:
        self.kill(container_id, "KILL")
        self.api.wait(container_id, timeout=30)
        self.api.start(container_id)

    @_translated("inspecting the container")
    @_retry
    def inspect(self, container_id: str) -> ContainerState:
        data = self.api.inspect_container(container_id)
        return _state(data)

    @_translated("listing containers")
    @_retry
    def list_containers(self, labels: dict[str, str]) -> list[ContainerState]:
        filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
        out: list[ContainerState] = []
        for summary in self.api.containers(all=True, filters=filters):
            state = summary.get("State", "")
            out.append(
                ContainerState(
                    id=summary["Id"],
                    status=str(state),
                    exit_code=None,
                    oom_killed=False,
                    labels=dict(summary.get("Labels") or {}),
                    name=(summary.get("Names") or [""])[0].lstrip("/"),
                    created=str(summary.get("Created", "")),
                )
            )
        return out

    @_translated("removing the container")
    @_retry
    def remove(self, container_id: str) -> None:
        try:
            self.api.remove_container(container_id, force=True, v=True)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            if exc.status_code == 409 and "already in progress" in _explain(exc):
                return
            raise

    @property
    def is_podman(self) -> bool:
        """Whether the engine is Podman's Docker-compatible service (asked once)."""
        if self._podman is None:
            try:
                self._podman = self.describe().name == "Podman"
            except SandboxError:
                return False
        return self._podman

    @property
    def isolated(self) -> bool:
        return True

    @property
    def sets_fsize_ulimit(self) -> bool:
        return not self.is_podman

    @property
    def networks(self) -> NetworkControl:
        from sandbox.backends.networks import DockerNetworks  # it imports this module

        return DockerNetworks(self.api)

    @_translated("asking the engine for its version")
    @_retry
    def describe(self) -> EngineDescription:
        version = self.api.version()
        info = self.api.info()
        name = "Docker Engine"
        os_name = str(info.get("OperatingSystem", ""))
        runtimes = tuple(sorted((info.get("Runtimes") or {}).keys()))
        if podman_dialect.is_podman(version):
            name = "Podman"
            runtimes = self._podman_runtimes() or runtimes
        elif "Docker Desktop" in os_name:
            name = "Docker Desktop"
        return EngineDescription(
            name=name,
            version=str(version.get("Version", "")),
            api_version=str(version.get("ApiVersion", "")),
            runtimes=runtimes,
            cgroup_version=str(info.get("CgroupVersion", "")),
            os=os_name,
        )

    def _podman_runtimes(self) -> tuple[str, ...]:
        """The runtime Podman runs containers with. Its compatible ``/info`` lists every
        runtime containers.conf knows a path for (crun, kata, runsc...), installed or not;
        its own API names the one in use."""
        try:
            response = self.api.get(f"{self.api.base_url}/v4.0.0/libpod/info", timeout=10)
            response.raise_for_status()
            name = response.json()["host"]["ociRuntime"]["name"]
        except (requests.exceptions.RequestException, ValueError, KeyError, TypeError):
            return ()
        return (str(name),) if name else ()

    @_translated("looking up the image")
    @_retry
    def image_exists(self, image: str) -> bool:
        try:
            self.api.inspect_image(image)
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.NotFound:
            return False
        return True

    def build_image(
        self, context_dir: str, tags: list[str], on_line: Callable[[str], None]
    ) -> None:
        """Build ``context_dir``'s Dockerfile, streaming progress lines to ``on_line``."""
        try:
            stream: Iterator[dict[str, Any]] = self.api.build(
                path=context_dir, tag=tags[0], rm=True, decode=True, pull=False
            )
            for chunk in stream:
                if "error" in chunk:
                    raise InternalError(
                        f"image build failed: {chunk['error'].strip()}",
                        hint="Read the build output above; the base image must be present locally.",
                    )
                text = chunk.get("stream") or chunk.get("status") or ""
                for line in str(text).splitlines():
                    if line.strip():
                        on_line(line.rstrip())
            for tag in tags[1:]:
                repo, _, version = tag.rpartition(":")
                self.api.tag(tags[0], repo, version)
        except SandboxError:
            raise
        except Exception as exc:
            raise translate(exc, what="building the image") from exc


def _state(data: dict[str, Any]) -> ContainerState:
    state = data.get("State") or {}
    return ContainerState(
        id=data["Id"],
        status=str(state.get("Status", "")),
        exit_code=state.get("ExitCode"),
        oom_killed=bool(state.get("OOMKilled")),
        labels=dict((data.get("Config") or {}).get("Labels") or {}),
        name=str(data.get("Name", "")).lstrip("/"),
        created=str(data.get("Created", "")),
    )
