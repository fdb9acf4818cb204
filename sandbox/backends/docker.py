"""The Docker (and Podman-compatible) engine backend, over docker-py.

Docker's exceptions become ``SandboxError``s in ``docker_errors`` (one place, ``translate``,
which also retries idempotent calls); the attached shell channel and control-command output
are in ``docker_exec``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.types import Ulimit

from sandbox.backends import podman as podman_dialect
from sandbox.backends.base import (
    ContainerSpec,
    ContainerState,
    EngineDescription,
    NetworkControl,
    RunResult,
)
from sandbox.backends.docker_errors import explain, retry_transient, translate, translated
from sandbox.backends.docker_exec import DockerExecChannel, read_frames
from sandbox.backends.networks import DockerNetworks
from sandbox.errors import (
    ImageNotFoundError,
    InternalError,
    SandboxError,
)

log = logging.getLogger(__name__)


# Detach keys nobody types: the default ctrl-p,ctrl-q would detach and kill the exec.
DETACH_KEYS = "ctrl-^,ctrl-_,ctrl-^,ctrl-_,ctrl-^"


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

    @translated("creating the container")
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

    @translated("opening the shell")
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

    @translated("running a control command")
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
            output = read_frames(response, timeout_s)
        finally:
            with contextlib.suppress(Exception):
                response.close()
        info = self.api.exec_inspect(created["Id"])
        code = info.get("ExitCode")
        return RunResult(exit_code=int(code) if code is not None else -1, output=output)

    @translated("creating a volume")
    def create_volume(self, name: str, labels: dict[str, str]) -> None:
        self.api.create_volume(name=name, labels=labels)

    @translated("removing a volume")
    @retry_transient
    def remove_volume(self, name: str) -> None:
        try:
            self.api.remove_volume(name, force=True)
        except docker.errors.NotFound:
            return

    @translated("stopping the container")
    def stop(self, container_id: str) -> None:
        try:
            self.api.stop(container_id, timeout=2)
        except docker.errors.NotFound:
            return

    @translated("killing the container")
    def kill(self, container_id: str, signal: str = "KILL") -> None:
        try:
            self.api.kill(container_id, signal=signal)
        except docker.errors.APIError as exc:
            if exc.status_code in (404, 409):  # gone or not running: nothing to kill
                return
            raise

    @translated("restarting the container")
    def restart(self, container_id: str) -> None:
        self.kill(container_id, "KILL")
        self.api.wait(container_id, timeout=30)
        self.api.start(container_id)

    @translated("inspecting the container")
    @retry_transient
    def inspect(self, container_id: str) -> ContainerState:
        data = self.api.inspect_container(container_id)
        return _state(data)

    @translated("listing containers")
    @retry_transient
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

    @translated("removing the container")
    @retry_transient
    def remove(self, container_id: str) -> None:
        try:
            self.api.remove_container(container_id, force=True, v=True)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            if exc.status_code == 409 and "already in progress" in explain(exc):
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
    def networks(self) -> NetworkControl | None:
        # Podman's networks (netavark, aardvark-dns) have not been proven with the egress proxy's
        # internal network: no allow-lists there rather than an untested fence.
        return None if self.is_podman else DockerNetworks(self.api)

    @translated("asking the engine for its version")
    @retry_transient
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

    @translated("looking up the image")
    @retry_transient
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
