"""Scale: 50 and 100 sessions open at once in one process.

- RSS per idle session: the bench process's VmRSS growth from before the sessions were created
  (after a warm-up) to when 50 / 100 sit idle, divided by their number. Target <= 2 MiB each at
  100. The host's MemAvailable drop per session (containers, shims, page cache: noisy) is info.
- With all of them open, the ``execute true`` round trip in one quiet session while ten other
  sessions print as fast as they can (``yes``, then ``cat /dev/urandom | base64``; started as
  background executes, bounded by ``timeout``). Floor: the same load without the engine: ten raw
  TTY execs drained by threads that only ``recv``, and marker round trips in one more raw shell
  (each in its own container with the session profile). Ours and the floor take turns in ABBA
  order (two rounds each, fresh floods every round), so a load that drifts weighs on both.
  Target: p99 <= 1.0x the floor's p99, both in the floods' first 5 s (their starts, their
  unattended bursts, the engine's buffers filling) and after.
  Nobody waits on the flooding sessions, so the server drains them at its unattended rate once
  past a burst, slower still while someone waits on another session
  (``sandbox.session.read_budget``, ``sandbox.session.waits``): their programs wait on their
  writes, as behind a slow terminal, and the engine's relay stops eating the CPU the quiet
  session needs.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bench.context import Context
from bench.env import rss_bytes
from bench.figures.common import open_session, timed_execute
from bench.floor import RawShell, remove_container, start_floor_container
from bench.stats import Row, compare, judge
from sandbox.session.manager import SessionManager
from sandbox.session.session import Session
from sandbox.session.waits import YIELD

FLOODS = {
    "yes": "timeout 900 yes",
    "urandom|base64": "timeout 900 sh -c 'cat /dev/urandom | base64'",
}


def _mem_available() -> int:
    with Path("/proc/meminfo").open("rb") as meminfo:
        for line in meminfo:
            if line.startswith(b"MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def run(ctx: Context) -> None:
    levels = ctx.size((50, 100), (3, 5))
    flooders = ctx.size(10, 2)
    n = ctx.size(300, 10)  # per flood and side, split over the rounds
    rounds = ctx.size(2, 1)
    settle_s = ctx.size(2.0, 0.3)
    first_s = ctx.size(5.0, 0.5)  # the floods' first seconds: starts, bursts, buffers filling
    ctx.params.update(
        levels=list(levels), flooders=flooders, samples=n, rounds=rounds, floods=FLOODS
    )
    env = ctx.env
    project = env.project("scale")
    with env.manager(max_sessions=max(levels) + 8) as manager, _pool() as pool:

        def create(_: object) -> Session:
            return open_session(manager, project)

        warm = list(pool.map(create, range(4)))  # threads, connection pool, code paths
        for s in warm:
            timed_execute(s, "true")
        list(pool.map(lambda s: manager.destroy(s.id, force=True), warm))
        gc.collect()
        time.sleep(settle_s)
        base_rss, base_avail = rss_bytes(), _mem_available()
        sessions: list[Session] = []
        for level in levels:
            ctx.log(f"opening sessions up to {level}")
            t0 = time.monotonic()
            sessions += pool.map(create, range(level - len(sessions)))
            took = time.monotonic() - t0
            for s in sessions:
                s.execute("true", timeout_s=30)  # every session has answered once
            time.sleep(settle_s)
            gc.collect()
            per = (rss_bytes() - base_rss) / level / 2**20
            row = ctx.add(
                Row(
                    ctx.figure,
                    f"bench RSS per idle session, {level} open",
                    "MiB",
                    value=per,
                    note=f"{threading.active_count()} threads; created in {took:.1f} s",
                )
            )
            if level == max(levels):
                judge(row, "<= 2 MiB", per <= 2.0)
            host = (base_avail - _mem_available()) / level / 2**20
            ctx.add(
                Row(
                    ctx.figure,
                    f"host MemAvailable drop per session, {level} open",
                    "MiB",
                    role="info",
                    value=host,
                )
            )

        quiet = sessions[0]
        ctx.log(f"round trip in one session, {len(sessions)} open, nothing flooding")
        for _ in range(10):
            timed_execute(quiet, "true")
        ctx.add(
            Row(
                ctx.figure,
                f"execute `true`, {len(sessions)} open, no flood",
                "ms",
                role="info",
                samples=[timed_execute(quiet, "true") for _ in range(n)],
            )
        )
        spare = sessions[1:]
        if len(spare) < len(FLOODS) * rounds * flooders:
            raise RuntimeError(f"{len(spare)} idle sessions cannot flood {rounds} rounds")
        for label, command in FLOODS.items():
            ours, floor = _Phase(), _Phase()
            for phase in _phases(rounds):
                if phase == "ours":
                    group, spare = spare[:flooders], spare[flooders:]
                    ctx.log(f"{flooders} sessions flood with {label}; round trips in another")
                    _our_flood(manager, pool, quiet, group, command, n // rounds, first_s, ours)
                else:
                    ctx.log(f"floor: raw marker rt while {flooders} raw execs flood ({label})")
                    _raw_flood(ctx, pool, flooders, n // rounds, command, first_s, floor)
            _add_rows(ctx, label, flooders, ours, floor, manager.config.unattended_rate_kib)


def _phases(rounds: int) -> list[str]:
    """Ours and the floor's phases in ABBA order (ours, floor, floor, ours, ...): a load that
    drifts during the figure (other engineers' builds) weighs on both alike."""
    order: list[str] = []
    for i in range(rounds):
        order += ["ours", "floor"] if i % 2 == 0 else ["floor", "ours"]
    return order


@dataclass
class _Phase:
    """One side's samples, pooled over its rounds."""

    first: list[float] = field(default_factory=list)  # round trips in the floods' first seconds
    # of each of ours in ``first``: (ms since the floods' start, ms from its last chunk read to
    # execute's return: the server's share after the engine delivered the end marker)
    stamps: list[tuple[float, float]] = field(default_factory=list)
    samples: list[float] = field(default_factory=list)  # round trips after them
    delivered: int = 0  # flood bytes that reached the reader while ``samples`` were taken
    seconds: float = 0.0  # ... and how long that took

    @property
    def rate(self) -> float:
        """MB/s the floods delivered in all while the steady samples were taken."""
        return self.delivered / self.seconds / 1e6 if self.seconds else 0.0


def _add_rows(
    ctx: Context, label: str, flooders: int, ours: _Phase, floor: _Phase, rate_kib: int
) -> None:
    target = "p99 <= 1.0x floor's"
    first_floor = ctx.add(
        Row(
            ctx.figure,
            f"raw marker rt in the raw floods' first seconds ({label})",
            "ms",
            role="floor",
            samples=floor.first,
            note="the first seconds from the raw floods' start, as long as ours'",
        )
    )
    first = ctx.add(
        Row(
            ctx.figure,
            f"execute `true` in the floods' first seconds ({label})",
            "ms",
            samples=ours.first,
            note="the first seconds from the floods' start: their background executes, their "
            "unattended bursts and the engine's own buffers filling",
        )
    )
    compare(first, first_floor, stat="p99")
    judge(first, target, first.ratio is not None and first.ratio <= 1.0)
    _add_slowest(ctx, label, ours)
    steady_floor = ctx.add(
        Row(
            ctx.figure,
            f"raw marker rt while {flooders} raw floods ({label})",
            "ms",
            role="floor",
            samples=floor.samples,
            note=f"the raw floods delivered {floor.rate:.0f} MB/s in all meanwhile",
        )
    )
    steady = ctx.add(
        Row(
            ctx.figure,
            f"execute `true` while {flooders} flood ({label})",
            "ms",
            samples=ours.samples,
            note=f"after the first seconds; the floods delivered {ours.rate:.1f} MB/s in all "
            f"({ours.rate / flooders:.2f} MB/s each) meanwhile: unattended, each is drained at "
            f"{rate_kib} KiB/s after a 1 MiB burst (SANDBOX_UNATTENDED_RATE_KIB), {YIELD}x "
            "slower while someone waits on another session; the floor drains at full speed",
        )
    )
    compare(steady, steady_floor, stat="p99")
    judge(steady, target, steady.ratio is not None and steady.ratio <= 1.0)


def _add_slowest(ctx: Context, label: str, ours: _Phase) -> None:
    """Where ours' slowest first-seconds round trips went: when they fell, and how much of
    each came after the engine delivered its end marker (the server's share; the rest is the
    write's way in, the shell's work in its container and the marker's way back)."""
    if not ours.stamps:
        return
    slowest = sorted(zip(ours.first, ours.stamps, strict=True), reverse=True)[:10]
    shares = [share for _, (_, share) in slowest]
    ctx.add(
        Row(
            ctx.figure,
            f"server's share of the 10 slowest first-seconds round trips ({label})",
            "ms",
            role="info",
            samples=shares,
            note="their ms / at s since the floods' start: "
            + ", ".join(f"{ms:.0f}/{at / 1000:.1f}" for ms, (at, _) in slowest),
        )
    )


def _our_flood(
    manager: SessionManager,
    pool: ThreadPoolExecutor,
    quiet: Session,
    group: list[Session],
    command: str,
    n: int,
    first_s: float,
    into: _Phase,
) -> None:
    """Flood ``group`` in the background, time ``execute true`` in ``quiet`` for ``first_s``
    from the floods' start and then ``n`` times more; the group is destroyed after."""
    try:
        t0 = time.monotonic()
        with ThreadPoolExecutor(len(group), thread_name_prefix="bench-flood") as starter:
            # all at once, and timed from their start: the first seconds are what a user
            # meets when someone's floods begin
            starts = [
                starter.submit(s.execute, command, background=True, timeout_s=0.5) for s in group
            ]
            while time.monotonic() - t0 < first_s or not all(f.done() for f in starts):
                at = time.monotonic()
                into.first.append(timed_execute(quiet, "true"))
                # the reader's clock of the last chunk: the end marker (or a prompt just after)
                ours = max(0.0, time.monotonic() - quiet.link.last_output)
                into.stamps.append(((at - t0) * 1000, ours * 1000))
                time.sleep(0.01)
            started = [f.result() for f in starts]
        if not all(r.still_running for r in started):
            raise RuntimeError(f"a flood did not keep running: {started}")
        before = [s.log.size for s in group]
        t0 = time.monotonic()
        into.samples += [timed_execute(quiet, "true") for _ in range(n)]
        into.seconds += time.monotonic() - t0
        into.delivered += sum(s.log.size - b for s, b in zip(group, before, strict=True))
    finally:
        list(pool.map(lambda s: manager.destroy(s.id, force=True), group))


@contextlib.contextmanager
def _pool() -> Iterator[ThreadPoolExecutor]:
    """A thread pool that drops its queued work when the figure fails or is interrupted."""
    pool = ThreadPoolExecutor(4, thread_name_prefix="bench-scale")
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _raw_flood(
    ctx: Context,
    pool: ThreadPoolExecutor,
    flooders: int,
    n: int,
    command: str,
    first_s: float,
    into: _Phase,
) -> None:
    """The same load without the engine: ``flooders`` raw TTY execs (each in its own container
    with the session profile) drained by threads that only ``recv``, and marker round trips in
    one more raw shell: for ``first_s`` from the floods' start, then ``n`` more."""
    env = ctx.env
    config = env.config()
    project = env.project("scale-floor")
    cids = list(
        pool.map(lambda _: start_floor_container(env, project, config), range(flooders + 1))
    )
    stop = threading.Event()
    counts = [0] * flooders
    threads: list[threading.Thread] = []
    shells: list[RawShell] = []
    try:
        shells = [RawShell(env.api, cid) for cid in cids]
        for shell in shells:
            shell.round_trip()
        quiet, floods = shells[0], shells[1:]
        for _ in range(10):
            quiet.round_trip("true; ")

        def drain(i: int, shell: RawShell) -> None:
            recv = shell.sock.recv
            with contextlib.suppress(OSError):
                while not stop.is_set():
                    data = recv(65536)
                    if not data:
                        return
                    counts[i] += len(data)

        t0 = time.monotonic()
        for i, shell in enumerate(floods):
            shell.send(f"{command}; ")
            thread = threading.Thread(target=drain, args=(i, shell), daemon=True)
            thread.start()
            threads.append(thread)
        while time.monotonic() - t0 < first_s:
            into.first.append(quiet.round_trip("true; ") * 1000)
            time.sleep(0.01)
        before = sum(counts)
        t0 = time.monotonic()
        into.samples += [quiet.round_trip("true; ") * 1000 for _ in range(n)]
        into.seconds += time.monotonic() - t0
        into.delivered += sum(counts) - before
    finally:
        stop.set()
        for shell in shells:
            shell.close()
        for thread in threads:
            thread.join(5)
        list(pool.map(lambda cid: remove_container(env, cid), cids))
