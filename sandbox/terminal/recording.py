"""Recordings: a session's output as an asciicast v2 file that ``asciinema play`` replays.

Format (https://docs.asciinema.org/manual/asciicast/v2/): a JSON header line, then one JSON
array per event, ``[seconds_since_start, "o", text]`` for output and ``[t, "r", "COLSxROWS"]``
for a resize. Output is decoded incrementally (a UTF-8 character split across reads is never
broken), so the "o" events joined are exactly the raw log decoded. A recording stops growing at
the same cap as the log. A recording reopened after a server restart continues with times
relative to its original header.
"""

from __future__ import annotations

import codecs
import json
import logging
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)


class CastRecorder:
    """Appends a session's output to ``path``; called from the session's reader thread."""

    def __init__(self, path: Path, *, rows: int, cols: int, max_bytes: int) -> None:
        self.path = path
        self._max = max_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._lock = threading.Lock()
        self._start = time.time()
        self._closed = False
        path.parent.mkdir(parents=True, exist_ok=True)
        existing = path.exists() and path.stat().st_size > 0
        if existing:
            try:
                with path.open(encoding="utf-8") as fh:
                    self._start = float(json.loads(fh.readline())["timestamp"])
            except (ValueError, KeyError, OSError):
                existing = False
        self._file = path.open("a" if existing else "w", encoding="utf-8")
        self._written = path.stat().st_size if existing else 0
        if not existing:
            self._start = float(int(self._start))
            header = {
                "version": 2,
                "width": cols,
                "height": rows,
                "timestamp": int(self._start),
                "env": {"TERM": "xterm-256color", "SHELL": "/bin/bash"},
            }
            self._emit(json.dumps(header))

    def _emit(self, line: str) -> None:
        if self._closed or self._written >= self._max:
            return
        try:
            self._file.write(line + "\n")
            self._file.flush()
        except OSError as exc:  # disk full: stop recording, keep the session going
            log.warning("recording %s stopped: %s", self.path, exc)
            self._written = self._max
            return
        self._written += len(line) + 1

    def output(self, data: bytes) -> None:
        with self._lock:
            text = self._decoder.decode(data)
            if text:
                self._emit(json.dumps([round(time.time() - self._start, 6), "o", text]))

    def resize(self, rows: int, cols: int) -> None:
        with self._lock:
            self._emit(json.dumps([round(time.time() - self._start, 6), "r", f"{cols}x{rows}"]))

    def close(self) -> None:
        with self._lock:
            tail = self._decoder.decode(b"", final=True)
            if tail:
                self._emit(json.dumps([round(time.time() - self._start, 6), "o", tail]))
            self._closed = True
            self._file.close()
