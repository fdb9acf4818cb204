"""Record golden marker streams: ``.venv/bin/python tests/unit/captured/markers/record.py``.

Each scenario runs commands in a real session on the fake backend (bash on a host pty, with the
session's rc file) and keeps the shell's raw bytes (``<name>.input``) and, in
``<name>.expected`` (JSON), when each protocol line was typed (its log offset, nonce and
command), the shell's marker token, and what a tracker made of the stream: its events and
each command's start, end and exit code. ``test_tracker.py`` replays the input through a fresh
``CommandTracker`` in chunks of every size and compares.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from sandbox.backends.fake import FakeBackend
from sandbox.config import SandboxConfig
from sandbox.models import CreateRequest
from sandbox.session.manager import SessionManager
from sandbox.shell.tracker import CommandTracker, Pending, ShellEvent

HERE = Path(__file__).resolve().parent

# name -> steps: ("execute", command) or ("interrupt", command): typed, then stopped by a timeout
SCENARIOS: dict[str, list[tuple[str, str]]] = {
    "shell_markers": [
        ("execute", "echo hi"),
        ("execute", "printf 'a\\nb\\nc\\n'; false"),
        # a forged end marker (another nonce) and a forged exit marker change nothing
        ("execute", "printf '\\033]777;sb;0000;E;5\\007'; printf '\\033]777;sb;exit;9;x\\007'"),
        ("execute", "for i in 1 2 3; do echo line $i; done; (exit 3)"),
        ("interrupt", "sleep 30"),
        ("execute", "echo after"),
        ("execute", "exit 4"),
    ],
}


def event_json(event: ShellEvent) -> dict[str, Any]:
    fields = dataclasses.asdict(event)
    for key, value in fields.items():
        if isinstance(value, bytes):
            fields[key] = value.decode("utf-8", "replace")
    return {"type": type(event).__name__, **fields}


def command_json(p: Pending) -> dict[str, Any]:
    return {"start": p.start, "end": p.end, "exit_code": p.exit_code, "newlines": p.newlines}


def record(name: str, steps: list[tuple[str, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "proj").mkdir()
        config = SandboxConfig(state_dir=root / "state", allowed_roots=(root,))
        manager = SessionManager(config, FakeBackend())
        try:
            created = manager.create(CreateRequest(project_path=str(root / "proj")))
            session = manager.get(created.session_id)
            tracker = session.link.tracker
            typed: list[dict[str, Any]] = []
            begin = tracker.begin

            def spy(nonce: str, *, sent_offset: int, display: bytes) -> Pending:
                typed.append({"offset": sent_offset, "nonce": nonce, "display": display.decode()})
                return begin(nonce, sent_offset=sent_offset, display=display)

            tracker.begin = spy  # type: ignore[method-assign]  # a spy on one instance
            for kind, command in steps:
                session.execute(command, timeout_s=1.0 if kind == "interrupt" else 10.0)
            data = session.log.read(0, session.log.size)
            token = tracker.token
        finally:
            manager.close()
    replay = CommandTracker()
    replay.new_shell(token, adopted=None)
    events: list[dict[str, Any]] = []
    commands: list[dict[str, Any]] = []
    offsets = [t["offset"] for t in typed] + [len(data)]
    events += [event_json(e) for e in replay.feed(data[: offsets[0]], 0)]
    for t, stop in zip(typed, offsets[1:], strict=True):
        p = replay.begin(t["nonce"], sent_offset=t["offset"], display=t["display"].encode())
        events += [event_json(e) for e in replay.feed(data[t["offset"] : stop], t["offset"])]
        commands.append(command_json(p))
    (HERE / f"{name}.input").write_bytes(data)
    expected = {"token": token, "typed": typed, "events": events, "commands": commands}
    (HERE / f"{name}.expected").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    for scenario in sys.argv[1:] or list(SCENARIOS):
        record(scenario, SCENARIOS[scenario])
