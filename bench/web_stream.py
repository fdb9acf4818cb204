"""Speed of the web view's live terminal: the log paged as a person's terminal shows it.

Run: ``.venv/bin/python bench/web_stream.py``. A session on the fake backend (a host pty, the
real shell protocol) prints about 15 MB; the whole log is then paged the way the live stream
pages it (``display_chunk`` in 64 KiB pages, each base64-encoded into a server-sent event) and,
as the floor, read in the same pages straight from the raw log. Prints both rates and their
ratio: the stream should outrun what a TTY exec socket delivers (13-21 MB/s, DESIGN.md).
"""

from __future__ import annotations

import base64
import tempfile
import time
from pathlib import Path

from sandbox.backends.fake import FakeBackend
from sandbox.config import SandboxConfig
from sandbox.models import CreateRequest
from sandbox.session.live_view import display_chunk
from sandbox.session.manager import SessionManager
from sandbox.web.terminal import PAGE_BYTES, event


def _best(fn: object, repeat: int = 3) -> float:
    assert callable(fn)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "proj").mkdir()
        config = SandboxConfig(state_dir=root / "state", allowed_roots=(root,), record=False)
        manager = SessionManager(config, FakeBackend())
        try:
            created = manager.create(CreateRequest(project_path=str(root / "proj")))
            session = manager.get(created.session_id)
            session.execute("seq 1 2000000; printf '\\033[1mdone\\033[0m\\n'", timeout_s=120)
            size = session.log.size

            def stream() -> None:
                offset = 0
                while offset < size:
                    data, offset = display_chunk(session, offset, PAGE_BYTES)
                    event("page", {"next": offset, "data": base64.b64encode(data).decode()})

            def floor() -> None:
                for offset in range(0, size, PAGE_BYTES):
                    session.log.read(offset, offset + PAGE_BYTES)

            streamed, floored = _best(stream), _best(floor)
        finally:
            manager.close()
    print(f"log: {size / 1e6:.1f} MB")
    print(f"{size / streamed / 1e6:8.1f} MB/s  live stream pages (display_chunk + base64 + SSE)")
    print(f"{size / floored / 1e6:8.1f} MB/s  floor: raw log reads, same pages")
    print(f"{floored / streamed:8.3f}       stream / floor (rate ratio)")


if __name__ == "__main__":
    main()
