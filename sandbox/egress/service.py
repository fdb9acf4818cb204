"""What the session manager asks of egress: register a session, change or drop its list,
report its decisions, and keep the proxy alive while this server has allow-list sessions.

One ``Egress`` per server. It starts the owner's proxy with the first session that needs it
(``register``), follows the proxy's log, and when the proxy stops (killed from outside,
crashed) starts it again and rewrites the policy: while it is down the sessions' connections
are refused, never let through another way (their network has no route out).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from sandbox.backends.base import Backend, ContainerState
from sandbox.config import SandboxConfig
from sandbox.egress import names
from sandbox.egress.journal import EgressJournal, LogFollower
from sandbox.egress.policy import canonical
from sandbox.egress.proxy import EgressProxy, require_networks, stale
from sandbox.models import EgressDecision, EgressStatus, EgressSummary

log = logging.getLogger(__name__)


class Egress:
    """This server's allow-list sessions and the owner's proxy they go through."""

    def __init__(
        self,
        config: SandboxConfig,
        backend: Backend,
        instance_id: str,
        session_dir: Callable[[str], Path],
        on_build_line: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.proxy = EgressProxy(config, backend, f"server-{instance_id}", on_build_line)
        self.journal = EgressJournal(session_dir)
        self._session_dir = session_dir
        self._sessions: dict[str, tuple[str, tuple[str, ...]]] = {}  # id -> secret, allow
        self._lock = threading.RLock()
        self._cid: str | None = None
        self._follower: LogFollower | None = None
        self._closed = False

    # -- sessions -----------------------------------------------------------------------------
    def register(self, session_id: str, secret: str, allow: list[str]) -> list[str]:
        """Let ``session_id`` (with ``secret``) reach ``allow``, or the list a live change
        gave it before a server restart; starts the proxy if needed. Returns the list."""
        require_networks(self.backend)
        allow = self._saved(session_id) or allow
        with self._lock:
            self._sessions[session_id] = (secret, tuple(canonical(allow)))
            self.journal.track(session_id)
            try:
                self._publish()
            except BaseException:
                self._sessions.pop(session_id, None)
                self.journal.forget(session_id)
                raise
            return list(self._sessions[session_id][1])

    def _saved_path(self, session_id: str) -> Path:
        return self._session_dir(session_id) / "egress-allow.json"

    def _saved(self, session_id: str) -> list[str] | None:
        try:
            saved = json.loads(self._saved_path(session_id).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return [str(p) for p in saved] if isinstance(saved, list) else None

    def update(self, session_id: str, allow: list[str]) -> list[str]:
        """Replace a registered session's allow-list, live; return the canonical list."""
        with self._lock:
            secret, before = self._sessions[session_id]
            self._sessions[session_id] = (secret, tuple(canonical(allow)))
            try:
                self._publish()
            except BaseException:
                self._sessions[session_id] = (secret, before)
                raise
            allow = list(self._sessions[session_id][1])
        path = self._saved_path(session_id)  # the container's label keeps the first list
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(allow), encoding="utf-8")
        return allow

    def forget(self, session_id: str) -> None:
        with self._lock:
            if self._sessions.pop(session_id, None) is None:
                return
            self.journal.forget(session_id)
            if self._cid is not None and not self._closed:
                try:
                    self.proxy.push(self._cid, self._sessions)
                except Exception as exc:
                    log.warning(
                        "could not drop session %s from the egress policy: %s", session_id, exc
                    )

    def allow_of(self, session_id: str) -> list[str] | None:
        with self._lock:
            entry = self._sessions.get(session_id)
            return list(entry[1]) if entry is not None else None

    # -- the proxy ----------------------------------------------------------------------------
    def _publish(self) -> None:
        """Make the proxy run, write the policy, and follow the log (lock held)."""
        if self._cid is None or not self.proxy.running():
            self._cid = self.proxy.ensure()
        self.proxy.push(self._cid, self._sessions)
        if self._follower is None:
            control = require_networks(self.backend)
            cid = self._cid
            self._follower = LogFollower(
                lambda since: control.follow_logs(cid, since), self.journal.record, self._revive
            )

    def _revive(self) -> bool:
        """The proxy's log ended: start it again (with the policy) while sessions need it.
        False when nothing needs it any more (the follower then stops)."""
        with self._lock:
            if self._closed or not self._sessions:
                self._follower = None
                return False
            if self.proxy.running():
                return True
            if not self.proxy.in_use():  # removed by gc: its sessions are gone too
                self._follower, self._cid = None, None
                return False
            log.warning("egress proxy %s stopped: starting it again", self.proxy.name)
            self._cid = self.proxy.ensure()
            self.proxy.push(self._cid, self._sessions)
            return True

    def close(self, keep: set[str] | None = None) -> None:
        """At server exit: stop following, drop this server's policy but for the sessions in
        ``keep`` (durable ones, which go on working until the next server adopts them), and
        remove proxy and network when no session is left on them."""
        with self._lock:
            self._closed = True
            if self._follower is not None:
                self._follower.stop()
            if self._cid is None:
                return
            kept = {sid: entry for sid, entry in self._sessions.items() if sid in (keep or ())}
            try:
                self.proxy.push(self._cid, kept)
                self.proxy.retire()
            except Exception as exc:
                log.warning("could not retire the egress proxy: %s", exc)

    # -- reports ------------------------------------------------------------------------------
    def summary(self, session_id: str) -> EgressSummary | None:
        allow = self.allow_of(session_id)
        if allow is None:
            return None
        allowed, denied = self.journal.counts(session_id)
        return EgressSummary(
            allow=allow,
            proxy=f"http://{self.proxy.name}:{names.PORT}",
            allowed=allowed,
            denied=denied,
            recent=self.journal.recent(session_id),
        )

    def notices(self, session_id: str) -> list[str]:
        """One sentence per host refused since the last report, with how to ask for it."""
        denied: dict[str, EgressDecision] = {}
        for decision in self.journal.take_denials(session_id):
            denied.setdefault(f"{decision.host}:{decision.port}", decision)
        return [
            f"egress: {key} was refused by this session's allow-list "
            f"({', '.join(self.allow_of(session_id) or []) or 'nothing'}). To reach it, ask the "
            f'person running the sandbox to allow it (session_update network=[..., "{d.host}"]).'
            for key, d in denied.items()
        ]

    def status(self) -> EgressStatus:
        with self._lock:
            count = len(self._sessions)
        state = self.proxy.find() if self.backend.networks is not None else None
        return EgressStatus(
            allow=canonical(self.config.egress_allow),
            clients_may_widen=self.config.clients_may_widen,
            proxy=state.name if state is not None else None,
            running=state is not None and state.running,
            sessions=count,
        )

    def stale(self, owner: str | None) -> list[ContainerState]:
        """Proxies no session uses (see ``proxy.stale``), less this server's own in use."""
        with self._lock:
            mine = self._cid if self._sessions else None
        return [s for s in stale(self.backend, owner) if s.id != mine]
