"""Session create, cold (no pool): ``SessionManager.create`` until the shell answers.

Floor: ``docker run -d`` with the same container profile + opening our own TTY exec + bash's
first answer to a marker line. Engine and floor samples alternate; removal is not timed. The
engine's time is split by wrapping its backend's calls (container create+start, exec attach,
the rest = waiting for the shell's ready marker and bookkeeping). Targets: p50 <= 1.2x the
floor; create from a warm pool (SANDBOX_WARM_POOL) p50 <= 50 ms, each create waiting until
the pool has refilled (the refill is what a pool costs; it is not timed).
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from bench.context import Context
from bench.figures.common import RACE_MARKERS, RACES, note_race
from bench.floor import RawShell, remove_container, start_floor_container
from bench.stats import Row, compare, judge, percentile
from sandbox.backends.docker import DockerBackend
from sandbox.errors import SandboxError
from sandbox.models import CreateRequest
from sandbox.session.manager import SessionManager


class TimedBackend:
    """Delegates to a ``DockerBackend`` and records how long each call took (ms)."""

    TIMED = ("create", "exec_attach", "image_exists", "remove")

    def __init__(self, inner: DockerBackend) -> None:
        self._inner = inner
        self.times: dict[str, list[float]] = defaultdict(list)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in self.TIMED:
            return attr

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self.times[name].append((time.perf_counter() - t0) * 1000)

        return timed


def run(ctx: Context) -> None:
    n = ctx.size(15, 2)
    ctx.params.update(samples=n)
    env = ctx.env
    backend = TimedBackend(DockerBackend(env.client))
    config = env.config()
    manager = SessionManager(config, backend=backend)
    project = env.project("create")
    engine: list[float] = []
    floor: list[float] = []
    floor_parts: dict[str, list[float]] = defaultdict(list)
    engine_parts: dict[str, list[float]] = defaultdict(list)
    try:
        warm = manager.create(CreateRequest(project_path=str(project)))  # not timed
        manager.destroy(warm.session_id, force=True)
        backend.times.clear()
        ctx.log(f"{n} cold creates, engine and floor alternating")
        while len(engine) < n:
            seen = {k: len(v) for k, v in backend.times.items()}
            t0 = time.perf_counter()
            try:
                created = manager.create(CreateRequest(project_path=str(project)))
            except SandboxError as exc:
                if not any(m in str(exc) for m in RACE_MARKERS) or len(RACES) > 20:
                    raise
                note_race(exc)
                continue
            total = (time.perf_counter() - t0) * 1000
            engine.append(total)
            for k, v in backend.times.items():
                if k != "remove":
                    engine_parts[k].append(sum(v[seen.get(k, 0) :]))
            engine_parts["rest (shell ready, bookkeeping)"].append(
                total - sum(v[-1] for k, v in engine_parts.items() if not k.startswith("rest"))
            )
            manager.destroy(created.session_id, force=True)

            t0 = time.perf_counter()
            cid = start_floor_container(env, project, config)
            t1 = time.perf_counter()
            raw = RawShell(env.api, cid)
            t2 = time.perf_counter()
            raw.round_trip()
            t3 = time.perf_counter()
            floor.append((t3 - t0) * 1000)
            floor_parts["docker run -d"].append((t1 - t0) * 1000)
            floor_parts["open exec"].append((t2 - t1) * 1000)
            floor_parts["first answer"].append((t3 - t2) * 1000)
            raw.close()
            remove_container(env, cid)
    finally:
        manager.close()
    f = ctx.add(
        Row(
            ctx.figure,
            "docker run -d + exec + first answer",
            "ms",
            role="floor",
            samples=floor,
            note=_parts(floor_parts),
        )
    )
    r = ctx.add(Row(ctx.figure, "session create, cold (Python API)", "ms", samples=engine))
    r.note = _parts(engine_parts)
    ratio = compare(r, f)
    judge(r, "p50 <= 1.2x floor", None if ratio is None else ratio <= 1.2)
    warm_ms = _warm_creates(ctx, n)
    w = ctx.add(Row(ctx.figure, "session create from warm pool", "ms", samples=warm_ms))
    judge(w, "p50 <= 50 ms", percentile(warm_ms, 50) <= 50 if warm_ms else None)


def _warm_creates(ctx: Context, n: int) -> list[float]:
    """Creates served by a pool of 2, each after the pool refilled (refill not timed)."""
    manager = SessionManager(ctx.env.config(warm_pool=2))
    project = ctx.env.project("warm")
    samples: list[float] = []
    try:
        first = manager.create(CreateRequest(project_path=str(project)))  # makes the kind wanted
        manager.destroy(first.session_id, force=True)
        for _ in range(n):
            deadline = time.monotonic() + 60
            while manager._pool is not None and manager._pool.count() < 2:
                if time.monotonic() > deadline:
                    raise SandboxError("the warm pool did not refill within 60 s")
                time.sleep(0.02)
            t0 = time.perf_counter()
            created = manager.create(CreateRequest(project_path=str(project)))
            samples.append((time.perf_counter() - t0) * 1000)
            manager.destroy(created.session_id, force=True)
    finally:
        manager.close()
    return samples


def _parts(parts: dict[str, list[float]]) -> str:
    return "p50 of parts: " + ", ".join(
        f"{name} {percentile(values, 50):.0f} ms" for name, values in parts.items()
    )
