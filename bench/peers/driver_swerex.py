"""SWE-ReX (1.4.0) as a peer: ``DockerDeployment`` and its runtime, in one of two modes.

``bash``: a persistent bash session (``run_in_session(BashAction)``); ``oneshot``: a fresh
process per command (``execute(Command)``). Run by its venv's python:
``driver_swerex.py '{"image": ..., "labels": {...}, "mode": "bash"}'``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from protocol import serve, timed
from swerex.deployment.docker import DockerDeployment
from swerex.runtime.abstract import BashAction, Command, CreateBashSessionRequest

CONFIG: dict[str, Any] = json.loads(sys.argv[1])
LOOP = asyncio.new_event_loop()
STATE: dict[str, Any] = {}
LABELS = [arg for k, v in CONFIG["labels"].items() for arg in ("--label", f"{k}={v}")]


def _go(coro: Any) -> Any:
    return LOOP.run_until_complete(coro)


async def _deploy() -> DockerDeployment:
    deployment = DockerDeployment(image=CONFIG["image"], pull="never", docker_args=LABELS)
    await deployment.start()
    if CONFIG["mode"] == "bash":
        await deployment.runtime.create_session(CreateBashSessionRequest())
    return deployment


async def _run(deployment: DockerDeployment, command: str) -> str:
    runtime = deployment.runtime
    if CONFIG["mode"] == "bash":
        obs = await runtime.run_in_session(BashAction(command=command, timeout=300))
        if obs.exit_code != 0:
            raise RuntimeError(f"{command!r} exited {obs.exit_code}")
        return str(obs.output)
    result = await runtime.execute(Command(command=command, shell=True, timeout=300))
    if result.exit_code != 0:
        raise RuntimeError(f"{command!r} exited {result.exit_code}: {result.stderr[:200]}")
    return str(result.stdout)


def start() -> None:
    STATE["d"] = _go(_deploy())
    _go(_run(STATE["d"], "true"))


def create(_: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    deployment = _go(_deploy())
    _go(_run(deployment, "true"))
    ms = (time.perf_counter() - t0) * 1000
    _go(deployment.stop())  # not timed
    return ms


def bulk(request: dict[str, Any]) -> float:
    n = request["bytes"] * 3 // 4
    return timed(lambda: _go(_run(STATE["d"], f"head -c {n} /dev/urandom | base64")))


def screen(request: dict[str, Any]) -> float | str:
    return "SWE-ReX keeps no screen: its bash session returns each command's output only"


def repl(_: dict[str, Any]) -> float | str:
    if CONFIG["mode"] != "bash":
        return "a one-shot process cannot be left waiting at a prompt"
    action = BashAction(
        command="python3 -q", is_interactive_command=True, expect=[">>> "], timeout=10
    )
    ms = timed(lambda: _go(STATE["d"].runtime.run_in_session(action)))
    quit_ = BashAction(command="exit()", is_interactive_quit=True, check="ignore", timeout=10)
    _go(STATE["d"].runtime.run_in_session(quit_))
    return ms


def stop() -> None:
    if "d" in STATE:
        _go(STATE["d"].stop())


if __name__ == "__main__":
    serve(
        start,
        {
            "true": lambda _: timed(lambda: _go(_run(STATE["d"], "true"))),
            "create": create,
            "bulk": bulk,
            "screen": screen,
            "repl": repl,
        },
        stop,
    )
