"""Recordings: a session's output as an asciicast v2 file that ``asciinema play`` replays.

Format (https://docs.asciinema.org/manual/asciicast/v2/): a JSON header line, then one JSON
array per event, ``[seconds_since_start, "o", text]`` for output and ``[t, "r", "COLSxROWS"]``
for a resize. Output is decoded incrementally (a UTF-8 character split across reads is never
broken), so the "o" events joined are exactly the raw log decoded. A recording stops growing at
the same cap as the log. A recording reopened after a server restart continues with times
relative to its original header.

Encoding is on the reader thread's path for every chunk: a chunk of printable ASCII, CR and LF
(most bulk output) is written as its JSON string without decoding it (``json.dumps`` costs ~6x
as much); anything else goes through the decoder and ``json.dumps``. Both give the same line.
"""

from __future__ import annotations

import codecs
import json
import logging
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

# The bytes a JSON string holds as they are, and CR and LF (escaped as \r and \n).
_PLAIN = bytes(b for b in range(0x20, 0x7F) if b not in b'"\\') + b"\r\n"


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
        self._file = path.open("ab" if existing else "wb")
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
            self._emit(json.dumps(header).encode())

    def _emit(self, line: bytes) -> None:
        if self._closed or self._written >= self._max:
            return
        try:
            self._file.write(line + b"\n")
            self._file.flush()
        except OSError as exc:  # disk full: stop recording, keep the session going
            log.warning("recording %s stopped: %s", self.path, exc)
            self._written = self._max
            return
        self._written += len(line) + 1

    def output(self, data: bytes) -> None:
        with self._lock:
            if data and not data.translate(None, _PLAIN) and not self._decoder.getstate()[0]:
                # as json.dumps writes it; the decoder holds no partial character to join
                string = b'"' + data.replace(b"\r", b"\\r").replace(b"\n", b"\\n") + b'"'
                self._event(b"o", string)
                return
            text = self._decoder.decode(data)
            if text:
                self._event(b"o", json.dumps(text).encode())

    def resize(self, rows: int, cols: int) -> None:
        with self._lock:
            self._event(b"r", json.dumps(f"{cols}x{rows}").encode())

    def _event(self, kind: bytes, string: bytes) -> None:
        """One event line, exactly as ``json.dumps([t, kind, text])`` writes it."""
        t = repr(round(time.time() - self._start, 6)).encode()
        self._emit(b"[" + t + b', "' + kind + b'", ' + string + b"]")

    def close(self) -> None:
        with self._lock:
            tail = self._decoder.decode(b"", final=True)
            if tail:
                self._event(b"o", json.dumps(tail).encode())
            self._closed = True
            self._file.close()
