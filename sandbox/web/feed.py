"""The session list a person sees: their token's sessions, one row each, refreshed live.

A row is what a team lead scans: name, project, status (busy, idle or exited), the command in
the foreground, the working directory, memory and CPU, when it started, whether it is durable,
and whether a person holds its terminal. Looking into a session costs an engine call (the
probe), so rows are cached for ``ROW_TTL_S``: however many people watch, a session is probed at
most that often.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sandbox.errors import SandboxError

if TYPE_CHECKING:
    from sandbox.session.manager import SessionManager
    from sandbox.session.session import Session

ROW_TTL_S = 2.0

Visible = Callable[[str, str], bool]  # (client, session id) -> may this client see it


def status_of(session: Session) -> str:
    if session.status != "running":
        return "exited"
    return "busy" if session.busy else "idle"


class SessionFeed:
    """Rows of the sessions a client may see, probed at most every ``ROW_TTL_S``."""

    def __init__(self, manager: SessionManager, visible: Visible) -> None:
        self.manager = manager
        self.visible = visible
        self._rows: dict[str, tuple[float, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def session(self, client: str, session_id: str) -> Session | None:
        """The session, if this client may see it."""
        if not self.visible(client, session_id):
            return None
        for session in self.manager.sessions():
            if session.id == session_id:
                return session
        return None

    def rows(self, client: str) -> list[dict[str, Any]]:
        """Blocking (engine calls): run it in a worker thread."""
        sessions = [s for s in self.manager.sessions() if self.visible(client, s.id)]
        live = {s.id for s in sessions}
        with self._lock:
            for gone in [sid for sid in self._rows if sid not in live]:
                del self._rows[gone]
        rows = [self._row(s) for s in sessions]
        return sorted(rows, key=lambda r: str(r["created_at"]), reverse=True)

    def _row(self, session: Session) -> dict[str, Any]:
        now = time.monotonic()
        with self._lock:
            cached = self._rows.get(session.id)
        if cached is not None and now - cached[0] < ROW_TTL_S:
            row = dict(cached[1])
        else:
            row = self._probe(session)
            with self._lock:
                self._rows[session.id] = (now, row)
        row["status"] = status_of(session)  # cheap: always current
        row["held_by_person"] = session.takeover.holder is not None
        row["log_bytes"] = session.log.size
        return row

    def _probe(self, session: Session) -> dict[str, Any]:
        spec = session.spec
        row: dict[str, Any] = {
            "session_id": session.id,
            "name": spec.name,
            "project_path": spec.project_path,
            "durable": spec.durable,
            "created_at": spec.created_at,
            "rows": session.rows,
            "cols": session.cols,
            "foreground": None,
            "cwd": None,
            "memory_mb": None,
            "cpu_percent": None,
            "recorded": session.recording is not None,
        }
        if session.status != "running":
            return row
        try:
            info = self.manager.info(session.id)
        except SandboxError:
            return row
        row.update(
            foreground=info.foreground,
            cwd=info.cwd,
            memory_mb=info.usage.memory_mb,
            cpu_percent=info.usage.cpu_percent,
        )
        return row
