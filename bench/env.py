"""What every figure shares: the engine client, this run's owner label, projects, cleanup.

Every container of a run carries ``sandbox.managed=true`` and ``sandbox.owner=bench-<random>``:
the engine's (through ``SandboxConfig.owner``), the floors' (labelled here), and the MCP server
subprocess's (through ``SANDBOX_OWNER``). ``BenchEnv.cleanup`` removes them all by that label and
deletes the run's temporary directory; ``bench.cli`` calls it on every exit path.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import docker

from sandbox.config import LABEL_MANAGED, LABEL_OWNER, SANDBOX_UID, SandboxConfig
from sandbox.session.manager import SessionManager

T = TypeVar("T")


class BenchEnv:
    """One run's resources. Create it, use it, and always call ``cleanup``."""

    def __init__(self) -> None:
        self.owner = f"bench-{secrets.token_hex(4)}"
        self.client = docker.from_env(timeout=300)
        self.client.ping()
        self.api: docker.APIClient = self.client.api
        self.base = Path(tempfile.mkdtemp(prefix="sandbox-bench-"))
        self.base.chmod(0o755)  # a uid-1000 shell must reach the projects under it
        self._shared: dict[str, Any] = {}
        self._lock = threading.RLock()

    @property
    def labels(self) -> dict[str, str]:
        return {LABEL_MANAGED: "true", LABEL_OWNER: self.owner}

    def project(self, name: str) -> Path:
        """A fresh project directory a uid-1000 shell can read and write."""
        path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.base))
        path.chmod(0o755)
        if os.geteuid() == 0:
            os.chown(path, SANDBOX_UID, SANDBOX_UID)
        return path

    def state_dir(self) -> Path:
        path = self.base / f".state-{secrets.token_hex(3)}"
        path.mkdir(mode=0o700)
        return path

    def config(self, **overrides: Any) -> SandboxConfig:
        values: dict[str, Any] = {
            "owner": self.owner,
            "state_dir": self.state_dir(),
            "allowed_roots": (self.base,),
        }
        values.update(overrides)
        return SandboxConfig(**values)

    @contextlib.contextmanager
    def manager(self, **overrides: Any) -> Iterator[SessionManager]:
        manager = SessionManager(self.config(**overrides))
        try:
            yield manager
        finally:
            manager.close()

    def shared(self, key: str, make: Callable[[], T]) -> T:
        """``make()`` once per run (floors more than one figure compares with)."""
        with self._lock:
            if key not in self._shared:
                self._shared[key] = make()
            value: T = self._shared[key]
            return value

    def containers(self) -> list[Any]:
        filters = {"label": [f"{k}={v}" for k, v in self.labels.items()]}
        return list(self.client.containers.list(all=True, filters=filters))

    def cleanup(self) -> int:
        """Remove every container of this run and its temporary files; return how many."""
        removed = 0
        for _ in range(3):  # an MCP server may still be removing its own
            found = self.containers()
            if not found:
                break
            for container in found:
                with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                    container.remove(force=True, v=True)
                    removed += 1
            time.sleep(0.2)
        shutil.rmtree(self.base, ignore_errors=True)
        return removed


def rss_bytes() -> int:
    """This process's resident set size (VmRSS)."""
    with Path("/proc/self/status").open("rb") as status:
        for line in status:
            if line.startswith(b"VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class RssSampler:
    """Samples VmRSS in a thread; ``peak`` and ``start`` in bytes. Use as a context manager."""

    def __init__(self, interval_s: float = 0.01) -> None:
        self.interval_s = interval_s
        self.start = rss_bytes()
        self.peak = self.start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rss", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak = max(self.peak, rss_bytes())

    def __enter__(self) -> RssSampler:
        self.start = rss_bytes()
        self.peak = self.start
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())

    @property
    def growth(self) -> int:
        return self.peak - self.start
