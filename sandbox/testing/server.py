"""``SandboxServerContainer``: the sandbox server image in a container (testcontainers), with
its projects directory, token and owner label, and a tool-call helper (see ``sandbox.testing``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from sandbox.config import LABEL_MANAGED, LABEL_OWNER, SANDBOX_UID

try:
    from testcontainers.core.container import DockerContainer
except ImportError as _exc:  # the plugin still loads (pytest imports it in every run)
    _TESTCONTAINERS_MISSING: ImportError | None = _exc
    if not TYPE_CHECKING:

        class DockerContainer:
            def __init__(self, *args: object, **kwargs: object) -> None:
                raise ModuleNotFoundError(
                    "sandbox.testing needs testcontainers: pip install 'testcontainers>=4.8'"
                ) from _TESTCONTAINERS_MISSING
else:
    _TESTCONTAINERS_MISSING = None

if TYPE_CHECKING:
    from mcp import Client

DEFAULT_SERVER_IMAGE = "sandbox-server:latest"
SERVER_PORT = 8765
SOCKET_IN_CONTAINER = "/var/run/docker.sock"
RYUK_ENV = "TESTCONTAINERS_RYUK_DISABLED"
IMAGE_ENV = "SANDBOX_SERVER_IMAGE"
PROJECTS_ENV = "SANDBOX_PROJECTS"
GID_ENV = "SANDBOX_DOCKER_GID"
OWNER_ENV = "SANDBOX_TESTING_OWNER"
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30
# Exit code and message of images/server/entrypoint.sh when the socket's group is missing.
EXIT_WRONG_GROUP = 77
_GROUP_RE = re.compile(r"which belongs to group (\d+)")


class SandboxToolError(RuntimeError):
    """A tool call answered ``isError``; ``code``, ``message``, ``hint`` are the contract's."""

    def __init__(self, tool: str, code: str, message: str, hint: str = "") -> None:
        super().__init__(f"{tool}: {code}: {message}" + (f" ({hint})" if hint else ""))
        self.tool = tool
        self.code = code
        self.message = message
        self.hint = hint


class SandboxServerContainer(DockerContainer):
    """The sandbox server image in a container, ready for MCP over HTTP with a bearer token.

    ``projects_dir`` is a host directory mounted at the same path inside (the engine resolves
    the server's bind mounts on the host); sessions may only use projects under it. Without one,
    a temporary directory is made (mode 0755) and removed by ``stop()``. ``token`` defaults to a
    random one; ``owner`` (the ``sandbox.owner`` label of the sessions) to a random name: it
    must be unique to this container, since ``stop()`` removes every session carrying it.
    ``docker_gid`` is the group of the engine socket as the engine sees it: by default the
    local socket's group, corrected once from the entrypoint's message if that was wrong.
    ``allowed_hosts`` replaces the Host names the server answers (default: loopback, the
    engine's host and whatever address this process reaches the server by, any port).
    """

    def __init__(
        self,
        image: str | None = None,
        *,
        projects_dir: str | os.PathLike[str] | None = None,
        token: str | None = None,
        owner: str | None = None,
        session_image: str | None = None,
        docker_gid: int | None = None,
        allowed_hosts: list[str] | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        **kwargs: Any,
    ) -> None:
        disable_ryuk_unless_set()
        super().__init__(image or os.environ.get(IMAGE_ENV) or DEFAULT_SERVER_IMAGE, **kwargs)
        self.token = token or secrets.token_urlsafe(32)
        self.owner = owner or f"sandbox-testing-{secrets.token_hex(4)}"
        self.start_timeout_s = start_timeout_s
        self._base_url: str | None = None
        self._own_projects = projects_dir is None
        if projects_dir is None:
            projects_dir = tempfile.mkdtemp(prefix="sandbox-projects-")
            Path(projects_dir).chmod(0o755)
        self.projects_dir = Path(projects_dir).resolve()
        gid_env = os.environ.get(GID_ENV)
        self._gid = docker_gid if docker_gid is not None else int(gid_env) if gid_env else None
        self.with_exposed_ports(SERVER_PORT)
        self.with_volume_mapping(str(self.projects_dir), str(self.projects_dir), "rw")
        self.with_env("SANDBOX_TOKEN", self.token)
        self.with_env("SANDBOX_ALLOWED_ROOTS", str(self.projects_dir))
        self.with_env("SANDBOX_OWNER", self.owner)
        if session_image:
            self.with_env("SANDBOX_IMAGE", session_image)
        self._allowed_hosts = tuple(allowed_hosts or ())

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> SandboxServerContainer:
        from testcontainers.core.config import get_docker_socket

        socket = get_docker_socket()
        self.with_volume_mapping(socket, SOCKET_IN_CONTAINER, "rw")
        labels = {LABEL_OWNER: self.owner, "sandbox.role": "server", **self._image_labels()}
        hosts = list(self._allowed_hosts) if self._allowed_hosts else self._default_hosts()
        gid = self._gid if self._gid is not None else _local_gid(socket)
        problem = "it did not start"
        for _ in range(3):
            self.with_env("SANDBOX_ALLOWED_HOSTS", ",".join(hosts))
            self._kwargs.update(
                group_add=[str(gid)],
                init=True,
                security_opt=["no-new-privileges:true"],
                cap_drop=["ALL"],
                labels=labels,
            )
            super().start()
            self._base_url = None
            reached_as = f"{_bracketed(self.get_container_host_ip())}:*"
            if not self._allowed_hosts and reached_as not in hosts:
                # Reached through an address only known now (a bridge IP): allow it, restart.
                hosts.append(reached_as)
                self._remove()
                continue
            wrong = self._wait_ready()
            if wrong is None:
                return self
            self._remove()
            problem = (
                f"it cannot use the engine socket {socket}, whose group inside the container "
                f"is {wrong}: set {GID_ENV}={wrong} (or pass docker_gid={wrong})"
            )
            if self._gid is not None or wrong == gid:
                break
            gid = wrong
        raise RuntimeError(f"the sandbox server ({self.image}) is not ready: {problem}")

    def _default_hosts(self) -> list[str]:
        """Host names the server answers: loopback and how this process reaches the engine."""
        from testcontainers.core.config import ConnectionMode

        docker = self.get_docker_client()
        names = ["localhost", "127.0.0.1", "::1", docker.host()]
        if docker.get_connection_mode() == ConnectionMode.gateway_ip:
            # Inside a container: the server is reached through its network's gateway.
            with contextlib.suppress(Exception):
                network = self._kwargs.get("network") or docker.find_host_network() or "bridge"
                for ipam in docker.client.networks.get(network).attrs["IPAM"]["Config"] or []:
                    if ipam.get("Gateway"):
                        names.append(str(ipam["Gateway"]))
        return [f"{_bracketed(name)}:*" for name in dict.fromkeys(names)]

    def _image_labels(self) -> dict[str, str]:
        """Labels that blank out the compose labels an image built by compose carries (the
        container would inherit them and look like part of that compose project). Checks that
        the image exists, and says how to make it when it doesn't and cannot be pulled."""
        import docker.errors

        client = self.get_docker_client().client
        try:
            image = client.images.get(self.image)
        except docker.errors.ImageNotFound:
            try:
                image = client.images.pull(self.image)
            except docker.errors.APIError as exc:
                raise RuntimeError(
                    f"image {self.image} is not on this engine and cannot be pulled "
                    f"({exc.explanation or exc}): build it with scripts/server-image.sh in a "
                    f"sandbox checkout, or set {IMAGE_ENV} to an image you can pull"
                ) from exc
        inherited = image.labels or {}
        return {key: "" for key in inherited if key.startswith("com.docker.compose.")}

    def _wait_ready(self) -> int | None:
        """Wait for ``/healthz``; the socket's real group when the entrypoint refused ours."""
        deadline = time.monotonic() + self.start_timeout_s
        container = self.get_wrapped_container()
        self._base_url = None
        while True:
            container.reload()
            if container.status in ("exited", "dead"):
                code = int(container.attrs["State"]["ExitCode"])
                logs = container.logs().decode(errors="replace")
                found = _GROUP_RE.search(logs)
                if code == EXIT_WRONG_GROUP and found:
                    return int(found.group(1))
                raise RuntimeError(f"the sandbox server exited ({code}):\n{logs[-4000:]}")
            if container.status == "running" and self._answers():
                return None
            if time.monotonic() > deadline:
                logs = container.logs().decode(errors="replace")
                raise TimeoutError(
                    f"the sandbox server did not answer /healthz within "
                    f"{self.start_timeout_s:.0f} s:\n{logs[-4000:]}"
                )
            time.sleep(0.2)

    def _answers(self) -> bool:
        try:
            url = self.base_url + "/healthz"
        except ConnectionError:  # no port mapping: it is exiting (seen on the next round)
            return False
        return _healthy(url)

    def _remove(self) -> None:
        if self._container is not None:
            with contextlib.suppress(Exception):
                self._container.remove(force=True, v=True)
            self._container = None

    def stop(self, force: bool = True, delete_volume: bool = True) -> None:
        """SIGTERM first (the server destroys its sessions), then remove everything."""
        container = self._container
        if container is not None:
            with contextlib.suppress(Exception):
                container.stop(timeout=STOP_TIMEOUT_S)
        try:
            if container is not None:
                client = self.get_docker_client().client
                leftovers = client.containers.list(
                    all=True,
                    filters={"label": [f"{LABEL_MANAGED}=true", f"{LABEL_OWNER}={self.owner}"]},
                )
                for leftover in leftovers:
                    with contextlib.suppress(Exception):
                        leftover.remove(force=True)
        finally:
            super().stop(force=force, delete_volume=delete_volume)
            if self._own_projects:
                shutil.rmtree(self.projects_dir, ignore_errors=True)

    # -- addresses ---------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """``http://host:port`` of the running server, as this process reaches it."""
        if self._base_url is None:
            docker = self.get_docker_client()
            host = _bracketed(self.get_container_host_ip())
            port = SERVER_PORT
            if docker.get_connection_mode().use_mapped_port:
                port = int(docker.port(self.get_container_id(), SERVER_PORT))
            self._base_url = f"http://{host}:{port}"
        return self._base_url

    @property
    def url(self) -> str:
        """The MCP endpoint (streamable HTTP); send ``Authorization: Bearer <token>``."""
        return self.base_url + "/mcp"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    # -- projects ----------------------------------------------------------------------------
    def make_project(self, name: str = "project") -> Path:
        """A new empty directory under ``projects_dir`` that a session's shell can write.

        The shell runs as the directory's owner; under root the directory is given to uid 1000,
        so the session's shell is not root (and works under SANDBOX_ROOT_SHELL=0 too)."""
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name)[:40] or "project"
        path = Path(tempfile.mkdtemp(prefix=f"{safe}-", dir=self.projects_dir))
        path.chmod(0o755)
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            os.chown(path, SANDBOX_UID, SANDBOX_UID)
        return path

    # -- MCP ---------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def client(self, *, read_timeout_s: float = 300.0) -> AsyncIterator[Client]:
        """A ready MCP client session (the SDK's streamable HTTP client, bearer token set)."""
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        timeout = httpx2.Timeout(30.0, read=read_timeout_s)
        async with (
            httpx2.AsyncClient(headers=self.headers, timeout=timeout) as http,
            Client(streamable_http_client(self.url, http_client=http)) as client,
        ):
            yield client

    async def acall(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call one tool on a new client session; its structured result, or ``SandboxToolError``."""
        async with self.client() as client:
            result = await client.call_tool(tool, arguments or {})
        content = result.structured_content
        data: dict[str, Any] = content if isinstance(content, dict) else {}
        if result.is_error:  # the contract's {"error": ...} is the text (no structured content)
            text = " ".join(getattr(block, "text", "") for block in result.content)
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = {}
            error = parsed.get("error") if isinstance(parsed, dict) else None
            error = error if isinstance(error, dict) else {}
            raise SandboxToolError(
                tool,
                str(error.get("code", "ERROR")),
                str(error.get("message", text)),
                str(error.get("hint", "")),
            )
        return data

    def call(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """``acall`` for synchronous code (not from inside a running event loop)."""
        return anyio.run(self.acall, tool, arguments)


def disable_ryuk_unless_set() -> None:
    """``TESTCONTAINERS_RYUK_DISABLED=true`` unless the variable is set (see the module doc)."""
    os.environ.setdefault(RYUK_ENV, "true")


def _local_gid(socket: str) -> int:
    """The group of a local engine socket (0 when it is not a local file)."""
    try:
        info = Path(socket).stat()
    except OSError:
        return 0
    return info.st_gid if stat.S_ISSOCK(info.st_mode) else 0


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False
