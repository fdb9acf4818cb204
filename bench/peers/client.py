"""The bench's side of a peer: its driver in a subprocess, asked one sample at a time.

``PeerProcess.start`` runs ``<venv python> bench/peers/<driver> CONFIG`` and waits for its
``ready`` line; ``ask(op, **params)`` sends one request and returns the milliseconds, or raises
``PeerSkip`` (the peer has no such thing) or ``PeerError``. A driver that stops answering
within ``timeout_s`` is killed.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import subprocess
import time
from pathlib import Path
from typing import IO, Any

from bench.peers.install import HERE, PeerUnavailable, Ready


class PeerSkip(Exception):
    """The peer has no equivalent of this figure (the reason is the message)."""


class PeerError(Exception):
    """The peer failed this request."""


class PeerProcess:
    def __init__(self, label: str, ready: Ready, config: dict[str, Any], log: Path) -> None:
        self.label = label
        self._log_path = log
        self._log = log.open("a")
        self._proc = subprocess.Popen(
            [str(ready.python), str(HERE / ready.peer.driver), json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            cwd=HERE,
        )

    def _line(self, timeout_s: float) -> dict[str, Any]:
        out: IO[str] | None = self._proc.stdout
        assert out is not None
        with selectors.DefaultSelector() as sel:
            sel.register(out, selectors.EVENT_READ)
            if not sel.select(timeout_s):
                self.close()
                raise PeerError(f"{self.label}: no answer within {timeout_s:.0f} s")
        line = out.readline()
        if not line:
            self._log.flush()
            last = (self._log_path.read_text().strip().splitlines() or ["?"])[-1]
            raise PeerError(f"{self.label}: the driver exited: {last[:300]}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def wait_ready(self, timeout_s: float = 180) -> None:
        reply = self._line(timeout_s)
        if not reply.get("ready"):
            self.close()
            raise PeerUnavailable(f"{self.label} did not start: {reply.get('error')}")

    def ask(self, op: str, timeout_s: float = 300, **params: Any) -> float:
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps({"op": op, **params}) + "\n")
            stdin.flush()
        except OSError as exc:
            raise PeerError(f"{self.label}: the driver is gone ({exc})") from exc
        reply = self._line(timeout_s)
        if "skip" in reply:
            raise PeerSkip(str(reply["skip"]))
        if "error" in reply:
            raise PeerError(f"{self.label}: {reply['error']}")
        return float(reply["ms"])

    def close(self) -> None:
        """Close stdin (the driver stops its sessions), then wait; kill after 30 s."""
        with contextlib.suppress(OSError):
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        deadline = time.monotonic() + 30
        while self._proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._log.close()
