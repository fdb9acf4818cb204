"""The proxy's decisions, per session: parsed from its log, kept, and followed live.

The proxy prints one line per decision (``squid.conf``'s ``logformat sandbox``)::

    egress 1795587558.823 <session> <client ip> GET allowed.test 80 200 TCP_MISS 296 162

``EgressJournal`` keeps each session's recent decisions in memory and appends all of them to
``<session dir>/egress.jsonl`` (what ``sandbox logs ID --egress`` prints). ``LogFollower``
reads the proxy's log stream in a thread; when the stream ends (the proxy stopped or was
killed) it calls ``on_stopped``, which restarts the proxy, then follows again.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sandbox.models import EgressDecision

log = logging.getLogger(__name__)

RECENT = 200  # decisions kept in memory per session
_DENIED = {"TCP_DENIED", "TAG_NONE", "NONE"}


@dataclass(frozen=True)
class Entry:
    session_id: str
    decision: EgressDecision
    stamp: float


def parse_line(line: str) -> Entry | None:
    """One access-log line as a decision (None for anything else the proxy prints)."""
    parts = line.split()
    if len(parts) != 11 or parts[0] != "egress" or parts[2] == "-":
        return None
    _, stamp, session, _client, method, host, port, status, verdict, sent, received = parts
    try:
        when = float(stamp)
        code = int(status)
        decision = EgressDecision(
            time=datetime.fromtimestamp(when, UTC).isoformat(timespec="milliseconds")[:-6] + "Z",
            method=method,
            host=host,
            port=int(port) if port.isdigit() else 0,
            allowed=verdict.split("/")[0] not in _DENIED and code not in (403, 407),
            status=code,
            bytes_in=int(sent),
            bytes_out=int(received),
        )
    except ValueError:
        return None
    return Entry(session, decision, when)


class EgressJournal:
    """Decisions per session: recent ones in memory, every one in the session's file."""

    def __init__(self, session_dir: Callable[[str], Path]) -> None:
        self._session_dir = session_dir
        self._recent: dict[str, collections.deque[EgressDecision]] = {}
        self._counts: dict[str, list[int]] = {}
        self._unreported: dict[str, list[EgressDecision]] = {}
        self._lock = threading.Lock()

    def track(self, session_id: str) -> None:
        with self._lock:
            self._recent.setdefault(session_id, collections.deque(maxlen=RECENT))
            self._counts.setdefault(session_id, [0, 0])

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._recent.pop(session_id, None)
            self._counts.pop(session_id, None)
            self._unreported.pop(session_id, None)

    def record(self, entry: Entry) -> bool:
        """Keep ``entry`` if its session is tracked here (another server's is not)."""
        sid, decision = entry.session_id, entry.decision
        with self._lock:
            recent = self._recent.get(sid)
            if recent is None:
                return False
            recent.append(decision)
            self._counts[sid][0 if decision.allowed else 1] += 1
            if not decision.allowed:
                self._unreported.setdefault(sid, []).append(decision)
        path = self._session_dir(sid) / "egress.jsonl"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as handle:
                handle.write(decision.model_dump_json() + "\n")
        except OSError as exc:
            log.warning("could not write the egress log of session %s: %s", sid, exc)
        return True

    def recent(self, session_id: str, limit: int = 20) -> list[EgressDecision]:
        with self._lock:
            return list(self._recent.get(session_id, ()))[-limit:]

    def counts(self, session_id: str) -> tuple[int, int]:
        with self._lock:
            allowed, denied = self._counts.get(session_id, [0, 0])
            return allowed, denied

    def take_denials(self, session_id: str) -> list[EgressDecision]:
        """The denials not reported yet (each is reported once, in an execute's notices)."""
        with self._lock:
            return self._unreported.pop(session_id, [])


def read_file(path: Path) -> Iterator[EgressDecision]:
    """The decisions a session's ``egress.jsonl`` holds, oldest first."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return
    for line in lines:
        try:
            yield EgressDecision(**json.loads(line))
        except (ValueError, TypeError):
            continue


class LogFollower:
    """Follows the proxy's log in a thread, feeding ``sink``; restarts it when it stops."""

    def __init__(
        self,
        stream: Callable[[int], Iterator[bytes]],
        sink: Callable[[Entry], object],
        on_stopped: Callable[[], bool],
    ) -> None:
        self._stream = stream
        self._sink = sink
        self._on_stopped = on_stopped
        self._stop = threading.Event()
        self._last = time.time() - 1  # the newest decision seen
        self._skip_until = self._last  # after a reconnect: lines seen already
        self._thread = threading.Thread(target=self._run, daemon=True, name="sandbox-egress-log")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._skip_until = self._last
            self._follow(int(self._last))
            if self._stop.is_set():
                return
            try:
                keep = self._on_stopped()
            except Exception as exc:  # a thread must not die of it: try again
                log.warning("egress proxy could not be restarted: %s", exc)
                keep = True
                self._stop.wait(1.0)
            if not keep:
                return

    def _follow(self, since: int) -> None:
        pending = b""
        try:
            for chunk in self._stream(since):
                if self._stop.is_set():
                    return
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    self._take(raw.decode("utf-8", "replace"))
        except Exception as exc:
            log.warning("egress proxy log stream broke: %s", exc)
            self._stop.wait(0.5)

    def _take(self, line: str) -> None:
        entry = parse_line(line)
        if entry is None or entry.stamp <= self._skip_until:
            return
        self._last = max(self._last, entry.stamp)
        self._sink(entry)
