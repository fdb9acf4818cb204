"""Sessions seen from outside any server: ``sandbox ls``, ``logs``, ``kill`` and ``gc``.

Everything here works from container labels (CONTRACT.md "Names"), so it sees the sessions of
every server on the engine, whichever process runs them, and touches nothing without
``sandbox.managed=true``. Session logs are read from the state directory
(``<state_dir>/sessions/<id>/raw.log``), the one shared with the server that wrote them.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from sandbox.backends.base import Backend, ContainerState
from sandbox.cli.console import (
    PipeCleaner,
    TerminalFilter,
    format_age,
    format_table,
    readable_commands,
)
from sandbox.config import (
    LABEL_CREATED,
    LABEL_DURABLE,
    LABEL_MANAGED,
    LABEL_NAME,
    LABEL_OWNER,
    LABEL_PROJECT,
    LABEL_ROLE,
    LABEL_SERVER,
    LABEL_SESSION,
    SandboxConfig,
)
from sandbox.errors import InvalidArgumentError, SandboxError, SessionNotFoundError
from sandbox.session.manager import SessionManager

FOLLOW_POLL_S = 0.2
FOLLOW_CHECK_S = 1.0
_MANAGED = {LABEL_MANAGED: "true"}
_IDENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class SessionRow:
    """One managed container as ``sandbox ls`` shows it (the ``--json`` object)."""

    session_id: str
    name: str
    project_path: str
    status: str
    owner: str
    durable: bool
    created_at: str
    age_s: int | None
    container_id: str
    server: str
    orphan: bool | None  # gc would remove it (None: unknown)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def session_rows(manager: SessionManager | None, backend: Backend) -> list[SessionRow]:
    """Every managed container on the engine, oldest first."""
    orphans: set[str] | None = None
    if manager is not None:
        orphans = {state.id for state in manager.orphans()}
    rows = [
        _row(state, orphans)
        for state in backend.list_containers(_MANAGED)
        if not state.labels.get(LABEL_ROLE)  # the egress proxy is not a session
    ]
    rows.sort(key=lambda r: (r.created_at, r.session_id))
    return rows


def _row(state: ContainerState, orphans: set[str] | None) -> SessionRow:
    labels = state.labels
    created = labels.get(LABEL_CREATED, "")
    return SessionRow(
        session_id=labels.get(LABEL_SESSION, ""),
        name=labels.get(LABEL_NAME, state.name),
        project_path=labels.get(LABEL_PROJECT, ""),
        status=state.status,
        owner=labels.get(LABEL_OWNER, ""),
        durable=labels.get(LABEL_DURABLE) == "true",
        created_at=created,
        age_s=_age_s(created),
        container_id=state.id[:12],
        server=labels.get(LABEL_SERVER, ""),
        orphan=None if orphans is None else state.id in orphans,
    )


def _age_s(created_at: str) -> int | None:
    try:
        created = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
    except ValueError:
        return None
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    return max(0, int((datetime.now(UTC) - created).total_seconds()))


def rows_table(rows: list[SessionRow]) -> str:
    headers = ("SESSION", "NAME", "PROJECT", "AGE", "STATUS", "OWNER", "DURABLE")
    cells = []
    for r in rows:
        status = r.status + (" (orphan)" if r.orphan else "")
        cells.append(
            (
                r.session_id or "?",
                r.name,
                r.project_path,
                format_age(r.created_at),
                status,
                r.owner,
                "yes" if r.durable else "no",
            )
        )
    return format_table(headers, cells)


# -- finding one session ---------------------------------------------------------------------


def find_container(backend: Backend, ident: str) -> ContainerState:
    """The managed container of session ``ident``: its id, a unique id prefix, or its name."""
    _check_ident(ident)
    exact = backend.list_containers({**_MANAGED, LABEL_SESSION: ident})
    if exact:
        return exact[0]
    every = backend.list_containers(_MANAGED)
    for matches in (
        [s for s in every if s.labels.get(LABEL_SESSION, "").startswith(ident)],
        [s for s in every if s.labels.get(LABEL_NAME) == ident],
    ):
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            ids = ", ".join(sorted(s.labels.get(LABEL_SESSION, "?") for s in matches))
            raise InvalidArgumentError(
                f"{ident!r} matches {len(matches)} sessions: {ids}",
                hint="Pass more of the session id (`sandbox ls` lists them).",
            )
    raise SessionNotFoundError(
        f"no sandbox session {ident!r} on this engine",
        hint="`sandbox ls` lists the sessions (by id, or pass a unique prefix or the name).",
    )


def _check_ident(ident: str) -> None:
    if not _IDENT.match(ident):
        raise InvalidArgumentError(
            f"bad session id {ident!r}", hint="Pass an id or name as `sandbox ls` shows it."
        )


def session_log_path(state_dir: Path, backend: Backend | None, ident: str) -> Path:
    """Where session ``ident``'s raw log is (the session may be gone; its log may remain)."""
    _check_ident(ident)
    sessions = state_dir / "sessions"
    sid = ident
    if backend is not None:
        with contextlib.suppress(SessionNotFoundError):
            sid = find_container(backend, ident).labels.get(LABEL_SESSION, ident)
    path = sessions / sid / "raw.log"
    if path.is_file():
        return path
    candidates = (
        [p for p in sessions.iterdir() if p.name.startswith(ident)] if sessions.is_dir() else []
    )
    if len(candidates) == 1 and (candidates[0] / "raw.log").is_file():
        return candidates[0] / "raw.log"
    raise SessionNotFoundError(
        f"no log for session {ident!r} in {sessions}",
        hint="Logs live in the state directory of the server that ran the session "
        "(SANDBOX_STATE_DIR) and are deleted with the session; `sandbox ls` lists sessions.",
    )


def stream_log(
    path: Path,
    on_bytes: Callable[[bytes], None],
    *,
    follow: bool = False,
    still_running: Callable[[], bool] | None = None,
) -> None:
    """Copy the log to ``on_bytes``; with ``follow``, keep going until ``still_running`` is
    False (the log file may be deleted meanwhile: the open file keeps serving it)."""
    with path.open("rb") as handle:
        next_check = 0.0
        running = True
        while True:
            data = handle.read(65536)
            if data:
                on_bytes(data)
                continue
            if not follow or not running:
                return
            now = time.monotonic()
            if still_running is not None and now >= next_check:
                running = still_running()
                next_check = now + FOLLOW_CHECK_S
                if not running:
                    continue  # one last read, then stop
            time.sleep(FOLLOW_POLL_S)


def print_egress_log(config: SandboxConfig, ident: str) -> None:
    """``sandbox logs ID --egress``: each connection the proxy allowed or refused."""
    from sandbox.backends import connect
    from sandbox.egress.journal import read_file

    backend: Backend | None
    try:
        backend = connect()
    except SandboxError:
        backend = None
    path = session_log_path(config.state_dir, backend, ident).with_name("egress.jsonl")
    rows = [
        (
            d.time,
            "allowed" if d.allowed else "DENIED",
            d.method,
            f"{d.host}:{d.port}",
            str(d.status),
            str(d.bytes_in),
            str(d.bytes_out),
        )
        for d in read_file(path)
    ]
    if not rows:
        print(
            "no egress decisions for this session (it has no allow-list, or used none)",
            file=sys.stderr,
        )
        return
    headers = ("TIME", "DECISION", "METHOD", "HOST", "STATUS", "BYTES IN", "BYTES OUT")
    print(format_table(headers, rows))


def print_log(config: SandboxConfig, ident: str, *, follow: bool, raw: bool) -> None:
    """``sandbox logs``: the session's log to stdout, as a terminal shows it (markers and
    queries removed, typed commands shown as such), as plain text when piped, or ``raw``."""
    from sandbox.backends import connect

    backend: Backend | None
    try:
        backend = connect()
    except SandboxError:
        if follow:
            raise
        backend = None  # the log is on disk: print it even when the engine is down
    path = session_log_path(config.state_dir, backend, ident)
    session_id = path.parent.name
    out = sys.stdout.buffer

    def write(data: bytes) -> None:
        out.write(data)
        out.flush()

    sink: TerminalFilter | PipeCleaner | None = None
    if not raw:
        if sys.stdout.isatty():
            sink = TerminalFilter(write, sanitize=True)
        else:
            sink = PipeCleaner(lambda text: write(text.encode("utf-8", "replace")))

    def on_bytes(data: bytes) -> None:
        if sink is None:
            write(data)
        else:
            sink.feed(readable_commands(data))

    def running() -> bool:
        return backend is not None and container_running(backend, session_id)

    stream_log(path, on_bytes, follow=follow, still_running=running)
    if sink is not None:
        sink.finish()


def container_running(backend: Backend, session_id: str) -> bool:
    states = backend.list_containers({**_MANAGED, LABEL_SESSION: session_id})
    return any(s.running for s in states)


# -- gc --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Orphan:
    state: ContainerState
    reason: str

    @property
    def session_id(self) -> str:
        return self.state.labels.get(LABEL_SESSION, "?")


def find_orphans(manager: SessionManager, owner: str | None) -> list[Orphan]:
    """What ``gc`` removes: managed containers whose server is gone or that stopped.

    ``owner`` limits it to containers with that ``sandbox.owner`` label (None: every owner).
    """
    found = []
    for state in manager.orphans(owner):
        server = state.labels.get(LABEL_SERVER, "")
        gone = bool(server) and manager.server_alive(server) is False
        reason = "its server is gone" if gone else f"the container has {state.status}"
        found.append(Orphan(state, reason))
    return found


def remove_orphans(manager: SessionManager, orphans: list[Orphan]) -> list[Orphan]:
    """Remove them with their logs; return those removed."""
    manager.remove_orphans([orphan.state for orphan in orphans])
    return list(orphans)


def orphans_table(orphans: list[Orphan]) -> str:
    headers = ("SESSION", "NAME", "OWNER", "AGE", "STATUS", "WHY")
    cells = [
        (
            o.session_id,
            o.state.labels.get(LABEL_NAME, o.state.name),
            o.state.labels.get(LABEL_OWNER, ""),
            format_age(o.state.labels.get(LABEL_CREATED, "")),
            o.state.status,
            o.reason,
        )
        for o in orphans
    ]
    return format_table(headers, cells)
