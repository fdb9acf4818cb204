"""terminal-bench's tmux harness (0.2.18) as a peer: ``TmuxSession`` on a container of ours.

``send_keys(..., block=True)`` types the command plus ``; tmux wait -S done`` and waits on
``tmux wait done`` in a second exec; the screen is ``capture_pane``. Run by its venv's python:
``driver_tmux.py '{"image": ..., "labels": {...}}'``.

terminal-bench's package ``__init__`` imports its whole harness, which needs Python >= 3.12 and
its agents' dependencies; the tmux harness does not, so the package is entered by its path.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import types
from typing import Any

import docker
from protocol import serve, timed

_spec = importlib.util.find_spec("terminal_bench")
assert _spec is not None
assert _spec.submodule_search_locations is not None
_pkg = types.ModuleType("terminal_bench")
_pkg.__path__ = list(_spec.submodule_search_locations)
sys.modules["terminal_bench"] = _pkg

from terminal_bench.terminal.tmux_session import TmuxSession  # noqa: E402

CONFIG: dict[str, Any] = json.loads(sys.argv[1])
CLIENT = docker.from_env()
STATE: dict[str, Any] = {}


def _open() -> tuple[Any, TmuxSession]:
    container = CLIENT.containers.run(
        CONFIG["image"], ["sleep", "infinity"], detach=True, labels=CONFIG["labels"], init=True
    )
    session = TmuxSession("bench", container, disable_recording=True)
    session.start()
    return container, session


def _block(session: TmuxSession, command: str) -> None:
    session.send_keys([command, "Enter"], block=True, max_timeout_sec=300)


def start() -> None:
    STATE["c"], STATE["s"] = _open()
    _block(STATE["s"], "true")


def create(_: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    container, session = _open()
    _block(session, "true")
    ms = (time.perf_counter() - t0) * 1000
    container.remove(force=True)  # not timed
    return ms


def bulk(request: dict[str, Any]) -> float:
    n = request["bytes"] * 3 // 4
    return timed(lambda: _block(STATE["s"], f"head -c {n} /dev/urandom | base64"))


def screen(request: dict[str, Any]) -> float:
    n = request["bytes"] * 3 // 4
    _block(STATE["s"], f"head -c {n} /dev/urandom | base64")
    return timed(STATE["s"].capture_pane)


def repl(_: dict[str, Any]) -> float:
    session: TmuxSession = STATE["s"]
    t0 = time.perf_counter()
    session.send_keys(["python3 -q", "Enter"])
    while not session.capture_pane().rstrip().endswith(">>>"):
        if time.perf_counter() - t0 > 10:
            raise TimeoutError("no >>> prompt within 10 s")
    ms = (time.perf_counter() - t0) * 1000
    session.send_keys(["exit()", "Enter"])
    _block(session, "true")  # back at bash
    return ms


def stop() -> None:
    if "c" in STATE:
        STATE["c"].remove(force=True)


if __name__ == "__main__":
    serve(
        start,
        {
            "true": lambda _: timed(lambda: _block(STATE["s"], "true")),
            "create": create,
            "bulk": bulk,
            "screen": screen,
            "repl": repl,
        },
        stop,
    )
