"""The egress proxy's lifecycle: its image, its internal network, its container, its policy.

``EgressProxy.ensure`` makes the owner's proxy run (building the image on first use, creating
the internal network, starting or restarting the container) and waits until it answers;
``push`` writes this server's policy file into it; ``retire`` removes proxy and network once
no session uses them; ``stale`` finds those of servers that are gone (for ``gc``).

The proxy runs with the sessions' own hardening: no capabilities, no new privileges, a
read-only root with sized tmpfs mounts, memory, CPU and pids limits, as an unprivileged user.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from sandbox.backends.base import Backend, ContainerSpec, ContainerState, NetworkControl
from sandbox.config import LABEL_MANAGED, LABEL_OWNER, LABEL_ROLE, SandboxConfig
from sandbox.egress import names
from sandbox.egress.policy import compile_allow
from sandbox.errors import EngineError, InvalidArgumentError, SandboxError

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 20.0
_PROBE = (
    "import socket,sys\n"
    f"try: socket.create_connection(('127.0.0.1', {names.PORT}), 1).close()\n"
    "except OSError: sys.exit(1)\n"
)


def context_dir() -> Path:
    """The proxy image's build context inside the installed package."""
    return Path(str(resources.files("sandbox").joinpath("images", "egress")))


def build_image(backend: Backend, on_line: Callable[[str], None] | None = None) -> None:
    emit = on_line or (lambda line: log.info("image build: %s", line))
    emit(f"building {names.IMAGE} from {context_dir()} (about a minute, once)")
    backend.build_image(str(context_dir()), names.image_tags(), emit)
    emit(f"built {names.IMAGE}")


def require_networks(backend: Backend) -> NetworkControl:
    control = backend.networks
    if control is None:
        raise InvalidArgumentError(
            "this engine cannot give a session an egress allow-list",
            hint="Allow-lists need Docker (the fake backend and Podman have none yet); ask for "
            "network true or false instead.",
        )
    return control


class EgressProxy:
    """The owner's proxy, seen from one server (``policy_name``: its file in the proxy)."""

    def __init__(
        self,
        config: SandboxConfig,
        backend: Backend,
        policy_name: str,
        on_build_line: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.policy_name = policy_name
        self.name = names.proxy_name(config.owner)
        self.network = names.network_name(config.owner)
        self._on_build_line = on_build_line
        self._lock = threading.Lock()

    # -- running ------------------------------------------------------------------------------
    def find(self) -> ContainerState | None:
        labels = {**names.labels(self.config.owner, names.ROLE_PROXY)}
        for state in self.backend.list_containers(labels):
            if state.name == self.name:
                return state
        return None

    def ensure(self) -> str:
        """Make the proxy run and answer; return its container id. True to the caller's
        ``push`` afterwards: a started or restarted proxy has no policy (it refuses all)."""
        control = require_networks(self.backend)
        with self._lock:
            if not self.backend.image_exists(names.IMAGE):
                build_image(self.backend, self._on_build_line)
            control.ensure_network(
                self.network, names.labels(self.config.owner, names.ROLE_NETWORK), internal=True
            )
            state = self.find()
            if state is None:
                cid = self._create(control)
            else:
                cid = state.id
                if not state.running:
                    control.start(cid)
                    log.warning("egress proxy %s was %s: restarted", self.name, state.status)
            self._wait_ready(cid)
            return cid

    def _create(self, control: NetworkControl) -> str:
        try:
            cid = self.backend.create(self._spec())
        except SandboxError:
            raced = self.find()  # another server of the owner created it meanwhile
            if raced is None:
                raise
            return raced.id
        control.connect(cid, self.config.egress_network)
        log.info("egress proxy %s started", self.name)
        return cid

    def running(self) -> bool:
        state = self.find()
        return state is not None and state.running

    def _wait_ready(self, cid: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                if (
                    self.backend.run(cid, ["python3", "-c", _PROBE], user=self._user()).exit_code
                    == 0
                ):
                    return
            except SandboxError as exc:
                log.debug("egress proxy not ready yet: %s", exc)
            if time.monotonic() > deadline:
                raise EngineError(
                    f"the egress proxy {self.name} did not start listening within "
                    f"{READY_TIMEOUT_S:g} s",
                    hint=f"Its log says why: docker logs {self.name}; `sandbox doctor` checks it.",
                )
            time.sleep(0.1)

    def push(self, cid: str, sessions: dict[str, tuple[str, tuple[str, ...]]]) -> None:
        """Write this server's policy file: each session id with its secret and allow-list."""
        policy = {
            "sessions": {
                sid: {"secret": secret, "allow": list(allow), "match": compile_allow(allow)}
                for sid, (secret, allow) in sessions.items()
            }
        }
        text = json.dumps(policy, separators=(",", ":"))
        argv = ["python3", names.HELPER, "put", self.policy_name, text]
        result = self.backend.run(cid, argv, user=self._user())
        if result.exit_code != 0:
            why = result.output.decode(errors="replace").strip()
            raise EngineError(
                f"could not update the egress proxy's policy: {why}",
                hint=f"docker logs {self.name} shows the proxy's state.",
            )

    def _user(self) -> str:
        return f"{names.PROXY_UID}:{names.PROXY_UID}"

    def _spec(self) -> ContainerSpec:
        uid = names.PROXY_UID
        tmpfs = f"rw,nosuid,nodev,uid={uid},gid={uid},mode=0755"
        return ContainerSpec(
            image=names.IMAGE,
            name=self.name,
            labels=names.labels(self.config.owner, names.ROLE_PROXY),
            mounts=(),
            command=(),
            user=self._user(),
            memory_mb=256,
            cpus=1.0,
            pids=256,
            network=self.network,
            tmpfs={
                "/run": f"{tmpfs},size=16m",
                "/var/spool/squid": f"{tmpfs},size=16m",
                "/var/log/squid": f"{tmpfs},size=4m",
                "/tmp": f"{tmpfs},size=16m",
            },
            read_only_root=True,
            workdir="/",
        )

    def in_use(self) -> bool:
        """Whether a session container is on the proxy's network."""
        control = require_networks(self.backend)
        state = control.network(self.network)
        proxy = self.find()
        users = set(state.containers if state is not None else ()) - {proxy.id if proxy else ""}
        return bool(users)

    # -- ending -------------------------------------------------------------------------------
    def retire(self) -> bool:
        """Remove the proxy and its network when no session container is on the network any
        more (another server's, or a durable one waiting for the next server). True if so."""
        control = self.backend.networks
        if control is None:
            return False
        with self._lock:
            return remove_if_unused(self.backend, control, self.network, self.find())


def remove_if_unused(
    backend: Backend, control: NetworkControl, network: str, proxy: ContainerState | None
) -> bool:
    state = control.network(network)
    users = set(state.containers if state is not None else ()) - {proxy.id if proxy else ""}
    if users:
        return False
    if proxy is not None:
        backend.remove(proxy.id)
    control.remove_network(network)
    log.info("egress proxy and network %s removed", network)
    return True


def stale(backend: Backend, owner: str | None) -> list[ContainerState]:
    """Proxies no session uses any more (their servers are gone or have none), for ``gc``."""
    control = backend.networks
    if control is None:
        return []
    labels = {LABEL_MANAGED: "true", LABEL_ROLE: names.ROLE_PROXY}
    if owner is not None:
        labels[LABEL_OWNER] = owner
    found = []
    for state in backend.list_containers(labels):
        network = control.network(names.network_name(state.labels.get(LABEL_OWNER, "")))
        users = set(network.containers if network is not None else ()) - {state.id}
        if not users:
            found.append(state)
    return found


def remove_stale(backend: Backend, state: ContainerState) -> None:
    control = backend.networks
    if control is None:
        return
    owner = state.labels.get(LABEL_OWNER, "")
    if not remove_if_unused(backend, control, names.network_name(owner), state):
        log.info("egress proxy %s is in use again: kept", state.name)
