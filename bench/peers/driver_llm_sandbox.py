"""llm-sandbox (0.3.46) as a peer: ``SandboxDockerSession`` and its ``execute_command``.

Run by its venv's python: ``driver_llm_sandbox.py '{"image": ..., "labels": {...}}'``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import docker
from llm_sandbox.docker import SandboxDockerSession
from protocol import serve, timed

CONFIG: dict[str, Any] = json.loads(sys.argv[1])
CLIENT = docker.from_env()
STATE: dict[str, Any] = {}


def _session() -> Any:
    session = SandboxDockerSession(
        client=CLIENT,
        image=CONFIG["image"],
        lang="python",
        skip_environment_setup=True,
        runtime_configs={"labels": CONFIG["labels"]},
    )
    session.open()
    return session


def _run(session: Any, command: str) -> Any:
    result = session.execute_command(command)
    if result.exit_code != 0:
        raise RuntimeError(f"{command!r} exited {result.exit_code}: {result.stderr[:200]}")
    return result


def start() -> None:
    STATE["s"] = _session()
    _run(STATE["s"], "true")


def create(_: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    session = _session()
    _run(session, "true")
    ms = (time.perf_counter() - t0) * 1000
    session.close()  # not timed
    return ms


def stop() -> None:
    for session in STATE.values():
        session.close()


def bulk(request: dict[str, Any]) -> float:
    n = request["bytes"] * 3 // 4
    command = f"sh -c 'head -c {n} /dev/urandom | base64'"
    return timed(lambda: _run(STATE["s"], command))


if __name__ == "__main__":
    serve(
        start,
        {"true": lambda _: timed(lambda: _run(STATE["s"], "true")), "create": create, "bulk": bulk},
        stop,
    )
