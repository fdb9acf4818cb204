"""The session registry: creation within limits, lookup, cleanup, and orphan collection.

``SessionManager`` is the engine's one public entry point; the MCP server and the CLI are thin
layers over it. Every container it creates carries ``sandbox.managed=true``, its session id,
its owner and the id of the server instance that runs it; a server holds a lock file in the
state directory for its whole life, so ``gc`` can tell a live server's containers from those
of a server that is gone.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Unpack

from sandbox.backends.base import Backend, ContainerState
from sandbox.config import (
    LABEL_DURABLE,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_ROLE,
    LABEL_SERVER,
    LABEL_SESSION,
    LABEL_SPEC,
    SESSION_HOME,
    SandboxConfig,
    new_instance_id,
)
from sandbox.egress.proxy import remove_stale as remove_stale_proxy
from sandbox.egress.service import Egress
from sandbox.errors import (
    InvalidArgumentError,
    SandboxError,
    SessionBusyError,
    SessionExitedError,
    SessionLimitError,
    SessionNotFoundError,
)
from sandbox.models import (
    CreateRequest,
    Defaults,
    Destroyed,
    EngineInfo,
    ExecResult,
    ServerInfo,
    SessionCreated,
    SessionInfo,
    SessionList,
)
from sandbox.session.factory import SessionFactory
from sandbox.session.paths import resolve_project_path
from sandbox.session.pool import WarmPool
from sandbox.session.profile import (
    Blueprint,
    spec_from_label,
)
from sandbox.session.profile import blueprint as make_blueprint
from sandbox.session.server_locks import ServerLocks
from sandbox.session.session import ExecKeywords, Session, now_iso
from sandbox.shell.durable import attach_command as durable_attach_command
from sandbox.version import __version__

log = logging.getLogger(__name__)


class SessionManager:
    """Creates, finds and destroys sessions for one server instance."""

    def __init__(
        self,
        config: SandboxConfig,
        backend: Backend | None = None,
        *,
        instance_id: str | None = None,
        on_build_line: Callable[[str], None] | None = None,
    ) -> None:
        if backend is None:
            from sandbox.backends import connect

            backend = connect()
        self.config = config
        self.backend = backend
        self.instance_id = instance_id or new_instance_id()
        self.egress = Egress(config, backend, self.instance_id, self.session_dir, on_build_line)
        self.factory = SessionFactory(config, backend, self.instance_id, self.egress, on_build_line)
        self._sessions: dict[str, Session] = {}
        self._reserved = 0
        self._lock = threading.Lock()
        self._closed = False
        self.locks = ServerLocks(config.state_dir / "servers", self.instance_id, config.owner)
        self.locks.take_server_lock()
        self._pool: WarmPool | None = None
        if config.warm_pool > 0:
            self._pool = WarmPool(
                config.warm_pool, build=self.factory.build, discard=self.factory.discard
            )
        self._stop_reaper = threading.Event()
        if config.idle_ttl_s > 0:
            threading.Thread(target=self._reap, daemon=True, name="sandbox-reaper").start()

    # -- server identity -----------------------------------------------------------------
    def server_alive(self, instance_id: str) -> bool | None:
        """True/False for servers that use our state dir; None when we cannot know."""
        return self.locks.alive(instance_id)

    def adopt_durable(self) -> list[str]:
        """Reattach to this owner's running durable sessions (after a server restart).

        Their shells, processes and logs are intact; the log continues at the same offsets,
        with what was printed while no server ran. Returns the adopted session ids."""
        if not self.locks.take_owner_lock():
            log.info("another server of owner %r holds its durable sessions", self.config.owner)
            return []
        labels = {LABEL_MANAGED: "true", LABEL_OWNER: self.config.owner, LABEL_DURABLE: "true"}
        known = {s.container_id for s in self.sessions()}
        adopted = []
        for state in self.backend.list_containers(labels):
            if not state.running or state.id in known:
                continue
            spec = spec_from_label(state.labels.get(LABEL_SPEC, ""))
            if spec is None:
                log.warning("durable container %s has no readable spec label", state.id[:12])
                continue
            session = self.factory.wrap(spec, state.id)
            try:
                if spec.egress is not None:
                    spec.egress = self.egress.register(
                        spec.session_id, spec.egress_secret, spec.egress
                    )
                session.open_shell(adopt=True)
            except SandboxError as exc:
                log.warning("could not reattach durable session %s: %s", spec.session_id, exc)
                self.egress.forget(spec.session_id)
                session.close()
                continue
            with self._lock:
                self._sessions[spec.session_id] = session
            adopted.append(spec.session_id)
            log.info("reattached durable session %s", spec.session_id)
        return adopted

    def _reap(self) -> None:
        """Stop sessions idle for longer than ``idle_ttl_s`` (durable ones keep their log)."""
        ttl = self.config.idle_ttl_s
        while not self._stop_reaper.wait(min(30.0, max(0.2, ttl / 4))):
            for session in self.sessions():
                if session.status != "running" or session.busy or session.idle_s < ttl:
                    continue
                log.info("session %s idle for %.0f s: stopping it", session.id, session.idle_s)
                with contextlib.suppress(SandboxError):
                    if session.spec.durable:
                        session.detach()
                        self.backend.stop(session.container_id)
                    else:
                        self.destroy(session.id, force=True)

    # -- create ----------------------------------------------------------------------------
    def create(self, request: CreateRequest) -> SessionCreated:
        if self._closed:
            raise SessionLimitError("the server is shutting down", hint="Start a new server.")
        blueprint = make_blueprint(self.config, request)
        with self._lock:
            if len(self._sessions) + self._reserved >= self.config.max_sessions:
                raise SessionLimitError(
                    f"{len(self._sessions)} sessions are open, the maximum is "
                    f"{self.config.max_sessions}",
                    hint="Destroy a session you no longer need, or raise SANDBOX_MAX_SESSIONS.",
                )
            self._reserved += 1
        try:
            session = self._take_warm(blueprint, request.rows, request.cols)
            if session is None:
                session = self.factory.build(blueprint, request.rows, request.cols)
            with self._lock:
                self._sessions[session.id] = session
            if self._pool is not None:
                self._pool.want(blueprint)
            log.info("session %s created (%s)", session.id, blueprint.project)
            return session.created()
        finally:
            with self._lock:
                self._reserved -= 1

    def _take_warm(self, blueprint: Blueprint, rows: int, cols: int) -> Session | None:
        """A session from the warm pool, fitted to the request; None when there is none (or
        the ones there turn out dead: killed from outside while they waited)."""
        while self._pool is not None:
            session = self._pool.take(blueprint)
            if session is None:
                return None
            try:
                if not self.backend.inspect(session.container_id).running:
                    raise SessionExitedError("its container is not running")
                if (rows, cols) != (session.rows, session.cols):
                    session.resize(rows, cols)
            except SandboxError as exc:
                log.info("warm session %s was unusable (%s): discarded", session.id, exc)
                self.factory.discard(session)
                continue
            session.spec.created_at = now_iso()
            session.last_activity_at = session.spec.created_at
            return session
        return None

    # -- lookup ----------------------------------------------------------------------------
    def get(self, session_id: str) -> Session:
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            raise SessionNotFoundError(
                f"no session {session_id!r} on this server",
                hint="Call session_list to see the live sessions, or session_create to start one.",
            )
        return session

    def sessions(self) -> list[Session]:
        with self._lock:
            return list(self._sessions.values())

    def session_dir(self, session_id: str) -> Path:
        return self.factory.session_dir(session_id)

    def list_sessions(self) -> SessionList:
        items = [s.summary() for s in self.sessions()]
        return SessionList(sessions=items, count=len(items))

    def info(self, session_id: str) -> SessionInfo:
        session = self.get(session_id)
        info = session.info(self.attach_command(session))
        if session.spec.egress is not None:
            summary = self.egress.summary(session_id)
            allow = summary.allow if summary is not None else session.spec.egress
            info = info.model_copy(update={"egress": summary, "egress_allow": allow})
        return info

    def attach_command(self, session: Session) -> str:
        """What a person runs to watch or take over: the session's own tmux when durable,
        else a second shell in the same container (it does not see the agent's terminal)."""
        if session.spec.durable:
            return durable_attach_command(session.container_id, session.spec.user)
        return (
            f"docker exec -it -u {session.spec.user} -w {shlex.quote(session.spec.workdir)} "
            f"-e HOME={SESSION_HOME} -e TERM=xterm-256color {session.container_id[:12]} bash"
        )

    def find_for_project(
        self,
        project_path: str,
        name: str | None,
        visible: Callable[[str], bool] = lambda _id: True,
    ) -> Session | None:
        """A running session of ``project_path`` (named ``name``, if given) that ``visible``
        admits (a client sees only its own), or None."""
        project = str(resolve_project_path(project_path, self.config.allowed_roots))
        for session in self.sessions():
            if session.spec.project_path != project or session.status != "running":
                continue
            if (name is None or session.spec.name == name) and visible(session.id):
                return session
        return None

    def execute(
        self,
        command: str,
        *,
        session_id: str | None = None,
        project_path: str | None = None,
        name: str | None = None,
        timeout_s: float | None = None,
        **options: Unpack[ExecKeywords],
    ) -> ExecResult:
        """Run ``command`` in a session, or in ``project_path``'s session (created on demand)."""
        if session_id is None and project_path is None:
            raise InvalidArgumentError(
                "execute needs session_id or project_path",
                hint="Pass the session_id from session_create, or the project's absolute path.",
            )
        if session_id is not None:
            session = self.get(session_id)
        else:
            assert project_path is not None
            found = self.find_for_project(project_path, name)
            if found is None:
                created = self.create(CreateRequest(project_path=project_path, name=name))
                found = self.get(created.session_id)
            session = found
        background = options.get("background", False)
        timeout = self._timeout(timeout_s, 5.0 if background else self.config.default_timeout_s)
        idle_timeout_s = options.get("idle_timeout_s")
        if idle_timeout_s is not None:
            if idle_timeout_s <= 0:
                raise InvalidArgumentError("idle_timeout_s must be > 0", hint="e.g. 2")
            options["idle_timeout_s"] = float(idle_timeout_s)
        if options.get("max_lines", 0) < 0:
            raise InvalidArgumentError("max_lines must be >= 0", hint="e.g. 200")
        result = session.execute(command, timeout_s=timeout, **options)
        if session.spec.egress is not None:
            result.notices.extend(self.egress.notices(session.id))
        return result

    def update_network(self, session_id: str, network: list[str]) -> list[str]:
        """Change a live allow-list session's hosts, without restarting it."""
        session = self.get(session_id)
        if session.spec.egress is None:
            raise InvalidArgumentError(
                f"session {session_id} has no egress allow-list to change",
                hint="Only a session created with network=[hosts] can change its hosts live; "
                "create a new session for another kind of network.",
            )
        allow = self.egress.update(session_id, network)
        session.spec.egress = allow
        return allow

    def _timeout(self, asked: float | None, default: float) -> float:
        if asked is None:
            return default
        if asked <= 0:
            raise InvalidArgumentError(f"timeout_s must be > 0, got {asked}", hint="e.g. 30")
        if asked > self.config.max_timeout_s:
            raise InvalidArgumentError(
                f"timeout_s={asked:g} is above the server's maximum of "
                f"{self.config.max_timeout_s:g}",
                hint="For long commands use background=true, then read to follow the output.",
            )
        return float(asked)

    # -- destroy / cleanup -------------------------------------------------------------------
    def destroy(self, session_id: str, *, force: bool = False) -> Destroyed:
        session = self.get(session_id)
        if session.busy and not force and session.status == "running":
            raise SessionBusyError(
                f"session {session_id} is running a command",
                hint="Stop it with signal, or pass force=true to destroy the session anyway.",
            )
        with self._lock:
            self._sessions.pop(session_id, None)
        result = session.close()
        self.factory.remove_container(session.container_id)
        self.egress.forget(session_id)
        if session.spec.durable:
            self.factory.remove_volume(session_id)
        shutil.rmtree(self.factory.session_dir(session_id), ignore_errors=True)
        log.info("session %s destroyed", session_id)
        return result

    def close(self) -> None:
        """Destroy this server's plain sessions, leave its durable ones running for the next
        server, and release its locks (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._stop_reaper.set()
        if self._pool is not None:
            self._pool.close()
        durable = {s.id for s in self.sessions() if s.spec.durable}
        for session in self.sessions():
            if session.spec.durable:
                session.detach()
                continue
            with contextlib.suppress(SandboxError):
                self.destroy(session.id, force=True)
        with self._lock:
            self._sessions.clear()
        self.egress.close(keep=durable)
        self.locks.release()

    def orphans(self, owner: str | None = None) -> list[ContainerState]:
        """Managed containers whose server is gone (or that have stopped); ``owner`` limits
        them to one ``sandbox.owner`` label."""
        labels = {LABEL_MANAGED: "true"}
        if owner is not None:
            labels[LABEL_OWNER] = owner
        mine = {s.container_id for s in self.sessions()}
        found = self.egress.stale(owner)
        for state in self.backend.list_containers(labels):
            if state.labels.get(LABEL_ROLE):
                continue  # the egress proxy: stale ones are found above
            server = state.labels.get(LABEL_SERVER, "")
            if server == self.instance_id or state.id in mine:
                continue
            # "created" is not dead: another server may be about to start it
            ended = state.status in ("exited", "dead")
            if state.labels.get(LABEL_DURABLE) == "true":
                # a running durable session waits for the next server of its owner
                if ended:
                    found.append(state)
                continue
            alive = self.server_alive(server) if server else None
            if alive is False or ended:
                found.append(state)
        return found

    def gc(self, *, dry_run: bool = False, owner: str | None = None) -> list[ContainerState]:
        """Remove orphans (see ``orphans``); return what was (or would be) removed."""
        found = self.orphans(owner)
        if not dry_run:
            self.remove_orphans(found)
        return found

    def remove_orphans(self, states: list[ContainerState]) -> None:
        """Remove these containers, their logs, and the lock files of their dead servers."""
        for state in states:
            if state.labels.get(LABEL_ROLE):
                remove_stale_proxy(self.backend, state)
                continue
            self.factory.remove_container(state.id)
            sid = state.labels.get(LABEL_SESSION, "-")
            if state.labels.get(LABEL_DURABLE) == "true":
                self.factory.remove_volume(sid)  # the server's copy of its log stays readable
            else:
                shutil.rmtree(self.factory.session_dir(sid), ignore_errors=True)
            server = state.labels.get(LABEL_SERVER)
            if server and self.server_alive(server) is False:
                self.locks.forget(server)

    # -- server info ---------------------------------------------------------------------------
    def server_info(self) -> ServerInfo:
        engine = self.backend.describe()
        c = self.config
        return ServerInfo(
            version=__version__,
            engine=EngineInfo(
                name=engine.name,
                version=engine.version,
                api_version=engine.api_version,
                runtimes=list(engine.runtimes),
            ),
            defaults=Defaults(
                image=c.image,
                memory_mb=c.memory_mb,
                cpus=c.cpus,
                pids=c.pids,
                timeout_s=c.default_timeout_s,
                network=c.network_enabled,
            ),
            max_sessions=c.max_sessions,
            session_count=len(self.sessions()),
            max_timeout_s=c.max_timeout_s,
            egress=self.egress.status(),
        )
