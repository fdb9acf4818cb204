"""A session's shared state: what it was created with, the command in flight, and the fields
the session's parts (``session``, ``views``, ``control``) share.

Threads: one reader thread per session reads the terminal and does only cheap work per chunk;
callers' threads do the rest on demand. ``_cond`` guards the shared state and wakes waiters.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sandbox.backends.base import Backend, ExecChannel
from sandbox.errors import SessionExitedError
from sandbox.models import Limits
from sandbox.session.input_watch import InputWatch
from sandbox.terminal.rawlog import RawLog
from sandbox.terminal.recording import CastRecorder
from sandbox.terminal.stream import LazyScreen, StreamScanner


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class SessionSpec:
    """What a session was created with (the create fields of the contract)."""

    session_id: str
    name: str
    image: str
    project_path: str
    workdir: str
    rows: int
    cols: int
    network: bool
    durable: bool
    limits: Limits
    created_at: str
    read_only_project: bool
    command: list[str] | None
    user: str  # "uid:gid" of the shell
    env: dict[str, str] = field(default_factory=dict)
    runtime: str | None = None


@dataclass
class Pending:
    """The command the shell is running (or was), tracked by the reader thread."""

    nonce: str
    sent_at: float
    start: int | None = None  # offset just after the start marker
    end: int | None = None  # offset of the end marker
    after: int | None = None  # offset just after the end marker
    exit_code: int | None = None
    newlines: int = 0
    sent_offset: int = 0  # log size when the line was typed: the echo starts here
    display: bytes = b""  # what the screen shows instead of the protocol line
    prompt_end: int | None = None  # just after the first prompt marker following the end
    pressure: str = ""  # pids pressure the shell cleared before it ran (the start marker's)

    @property
    def finished(self) -> bool:
        return self.end is not None


class SessionState:
    """The fields every part of a session uses (set by ``Session.__init__``)."""

    spec: SessionSpec
    id: str
    backend: Backend
    container_id: str
    rows: int
    cols: int
    log: RawLog
    recording: CastRecorder | None
    last_activity_at: str
    resets: int
    _execute_max_bytes: int
    _cond: threading.Condition
    _exec_lock: threading.Lock
    _screen_lock: threading.Lock
    _scanner: StreamScanner
    _screen: LazyScreen
    _echoes: collections.deque[tuple[int, int, bytes]]
    _channel: ExecChannel | None
    _alive: bool
    _destroyed: bool
    _shell_pid: int | None
    _exit_code: int | None
    _pending: Pending | None
    _last_exit_code: int | None
    _read_offset: int
    _last_output: float
    _oom_baseline: int
    _oom_seen: bool
    _cpu_sample: tuple[float, float] | None
    _started_mono: float
    _activity_mono: float
    _watchers: int
    _attention: threading.Event  # set when someone starts to wait on output or types
    _generation: int  # of the shell: a reader of an older one changes nothing
    _exit_marker: int | None
    _shell_token: str | None
    _prompt_seen: bool
    _prompt_marker_works: bool
    _skip_prompt_at: int | None
    _start_pid: tuple[str, int | None] | None
    _lost_since: float | None
    _lost_prompt: int | None
    _revivable: bool  # the login shell ended but its container runs: execute starts a new one
    _idle_bytes: int  # output while no command ran (a background job writing to the terminal)
    _input_watch: InputWatch  # asks the kernel whether the foreground program waits for input

    def reset(self) -> None:
        """Kill the container, start it again and reopen the shell (see ``Session``)."""
        raise NotImplementedError

    def _require_alive(self) -> ExecChannel:
        if self._destroyed:
            raise SessionExitedError(f"session {self.id} was destroyed")
        if not self._alive or self._channel is None:
            error = SessionExitedError(
                f"the shell of session {self.id} has exited"
                + (f" with code {self._exit_code}" if self._exit_code is not None else ""),
            )
            if self._revivable:
                error.hint = (
                    "Call execute (any command): it starts a fresh shell in the same container, "
                    "where background processes still run."
                )
            raise error
        return self._channel

    @contextlib.contextmanager
    def _watching(self) -> Iterator[None]:
        """Count the caller (holding ``_cond``) as waiting on output: the reader runs at full
        speed meanwhile, woken at once if it pauses."""
        self._watchers += 1
        self._attend()
        try:
            yield
        finally:
            self._watchers -= 1

    def _attend(self) -> None:
        """Wake a reader that pauses between reads of unattended output: an answer is due."""
        self._attention.set()

    def _touch(self) -> None:
        self.last_activity_at = now_iso()
        self._activity_mono = time.monotonic()

    # -- execute -------------------------------------------------------------------------
