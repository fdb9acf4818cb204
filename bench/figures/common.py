"""Small helpers the figures share."""

from __future__ import annotations

import time
from pathlib import Path

from bench.context import Context
from bench.floor import docker_exec_cli, shared_floor_container
from bench.stats import Row
from sandbox.errors import SandboxError
from sandbox.models import CreateRequest
from sandbox.session.manager import SessionManager
from sandbox.session.session import Session

# What another server's start-up ``gc`` does to a container caught between create and start
# (state "created", so "not running"): it removes it. Retried, and counted in the results.
RACE_MARKERS = ("Removal In Progress", "is not running", "No such container")


def open_session(manager: SessionManager, project: Path, **kwargs: object) -> Session:
    request = CreateRequest(project_path=str(project), **kwargs)  # type: ignore[arg-type]
    for attempt in range(3):
        try:
            created = manager.create(request)
        except SandboxError as exc:
            if attempt == 2 or not any(m in str(exc) for m in RACE_MARKERS):
                raise
            note_race(exc)
            continue
        return manager.get(created.session_id)
    raise AssertionError("unreachable")


RACES: list[str] = []


def note_race(exc: BaseException) -> None:
    """Record a create that failed because someone else removed its container mid-way."""
    RACES.append(f"{type(exc).__name__}: {exc}"[:200])


def timed_execute(session: Session, command: str, *, timeout_s: float = 30.0) -> float:
    """Milliseconds of one ``execute``; fails loudly when the command did not finish cleanly."""
    t0 = time.perf_counter()
    result = session.execute(command, timeout_s=timeout_s)
    ms = (time.perf_counter() - t0) * 1000
    if result.exit_code != 0 or result.still_running:
        raise RuntimeError(f"execute {command!r} returned {result.model_dump()}")
    return ms


def docker_exec_cli_row(ctx: Context) -> Row:
    """``docker exec CID true`` (CLI) as a peer row, measured once per run."""

    def make() -> Row:
        n = ctx.size(30, 5)
        ctx.log(f"docker exec CLI x{n}")
        samples = docker_exec_cli(shared_floor_container(ctx.env), n)
        return Row(ctx.figure, "`docker exec CID true` (CLI)", "ms", role="peer", samples=samples)

    row = ctx.env.shared("docker-exec-cli", make)
    copy = Row(ctx.figure, row.name, row.unit, role=row.role, samples=list(row.samples))
    if row.figure != ctx.figure:
        copy.note = f"measured once per run, in the {row.figure} figure"
    return ctx.add(copy)
