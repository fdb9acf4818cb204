"""Large output: ``head -c 100000000 /dev/urandom | base64`` (135 MB) through the engine.

Engine: ``execute`` (small ``max_lines``) until the command ends, then the whole output paged
with ``read_log`` in 1 MiB pages; the rate is TTY bytes / (execute + paging). Floor: the same
command on our own bare TTY exec socket, bytes/s until its marker comes back. Both run in a
container with the same profile (1 CPU), in turn, ABBA over two rounds (a load that drifts
weighs on both); each side's rate is its bytes over its seconds, all rounds together. Host
floors (``bench.host_floor``, no Docker, no CPU limit): the same command into a pty on the host
(what any terminal-based tool pays at least: ``base64`` line-buffers on a terminal, one write
per 77-byte line) and into a pipe. The bench process's peak RSS growth is sampled from
/proc/self/status during the engine part.
Targets: >= 0.7x the floor's rate; RSS growth <= 64 MB.
"""

from __future__ import annotations

import gc
import os
import time

from bench import host_floor
from bench.context import Context
from bench.env import RssSampler
from bench.figures.common import open_session
from bench.floor import RawShell, remove_container, start_floor_container
from bench.stats import Row, compare, judge
from sandbox.session.session import Session

PAGE = 1024 * 1024


def run(ctx: Context) -> None:
    size = ctx.size(100_000_000, 1_500_000)
    rounds = ctx.size(2, 1)
    command = f"head -c {size} /dev/urandom | base64"
    ctx.params.update(command=command, page_bytes=PAGE, rounds=rounds)
    env = ctx.env
    config = env.config()
    floor_bytes, floor_s = 0, 0.0
    ours = _Ours()
    cid = start_floor_container(env, env.project("output-floor"), config)
    raw = RawShell(env.api, cid)
    try:
        raw.round_trip()
        with env.manager() as manager:
            session = open_session(manager, env.project("output"))
            session.execute("true", timeout_s=10)
            gc.collect()
            with RssSampler() as rss:
                for turn in range(rounds * 2):
                    if (turn % 4) in (0, 3):  # floor, ours, ours, floor
                        ctx.log(f"floor: {command} on a raw TTY exec socket")
                        t0 = time.perf_counter()
                        floor_bytes += raw.wait(raw.send(f"{command}; "))
                        floor_s += time.perf_counter() - t0
                    else:
                        ctx.log(f"engine: {command} via execute + read_log")
                        ours.run(session, command)
    finally:
        raw.close()
        remove_container(env, cid)
    floor = ctx.add(
        Row(
            ctx.figure,
            "raw TTY socket read",
            "MB/s",
            role="floor",
            value=floor_bytes / floor_s / 1e6,
            note=f"{floor_bytes / 1e6:.0f} MB in {floor_s:.1f} s",
        )
    )

    ctx.log(f"host floors: {command} into a pty and into a pipe, no Docker")
    pty_ms, pty_bytes = host_floor.pty_ms(command)
    pipe_ms, pipe_bytes = host_floor.pipe_ms(command)
    pty_row = ctx.add(
        Row(
            ctx.figure,
            "host pty read, no Docker",
            "MB/s",
            role="floor",
            value=pty_bytes / pty_ms / 1e3,
            note=f"{pty_bytes / 1e6:.0f} MB in {pty_ms / 1000:.1f} s: the kernel's pty with "
            "the program line-buffered, as on any terminal",
        )
    )
    ctx.add(
        Row(
            ctx.figure,
            "host pipe read, no Docker",
            "MB/s",
            role="info",
            value=pipe_bytes / pipe_ms / 1e3,
            note=f"{pipe_bytes / 1e6:.0f} MB in {pipe_ms / 1000:.1f} s: stdout a pipe, the "
            "program writes big blocks (what a one-shot exec gives it)",
        )
    )

    r = ctx.add(
        Row(
            ctx.figure,
            "execute + read_log (1 MiB pages)",
            "MB/s",
            value=ours.bytes / (ours.execute_s + ours.paging_s) / 1e6,
            note=f"{ours.bytes / 1e6:.0f} MB: execute {ours.execute_s:.1f} s + {ours.pages} "
            f"read_log pages {ours.paging_s:.1f} s",
        )
    )
    ratio = compare(r, floor, higher_is_better=True)
    judge(r, ">= 0.7x floor rate", None if ratio is None else ratio >= 0.7)
    alone = ours.bytes / ours.execute_s / 1e6
    cpu = ours.cpu_s / ours.execute_s * 100
    compare(
        ctx.add(
            Row(
                ctx.figure,
                "execute alone",
                "MB/s",
                role="info",
                value=alone,
                note=f"the bench process used {cpu:.0f}% of a core meanwhile; ratio: to the "
                "host pty",
            )
        ),
        pty_row,
        higher_is_better=True,
    )
    ctx.add(
        Row(
            ctx.figure,
            "read_log paging alone",
            "MB/s",
            role="info",
            value=ours.bytes / max(ours.paging_s, 1e-9) / 1e6,
        )
    )
    growth = ctx.add(
        Row(
            ctx.figure,
            "bench process peak RSS growth",
            "MiB",
            value=rss.growth / 2**20,
            note=f"RSS {rss.start / 2**20:.0f} -> peak {rss.peak / 2**20:.0f} MiB",
        )
    )
    judge(growth, "<= 64 MiB", rss.growth <= 64 * 2**20)


class _Ours:
    """Our side's runs of the command, added up: ``execute``, then ``read_log`` paging."""

    def __init__(self) -> None:
        self.bytes = 0
        self.pages = 0
        self.execute_s = 0.0
        self.paging_s = 0.0
        self.cpu_s = 0.0  # the bench process's CPU during the executes

    def run(self, session: Session, command: str) -> None:
        cpu0 = os.times()
        t0 = time.perf_counter()
        result = session.execute(command, timeout_s=600, max_lines=5)
        t1 = time.perf_counter()
        cpu1 = os.times()
        if result.exit_code != 0 or result.still_running:
            raise RuntimeError(f"execute returned {result.model_dump(exclude={'output'})}")
        start, end = result.log_range.from_byte, result.log_range.to_byte
        offset = start
        while offset < end:
            chunk = session.read_log(offset, min(PAGE, end - offset))
            if chunk.next_byte <= offset:
                raise RuntimeError(f"read_log made no progress at {offset}")
            offset = chunk.next_byte
            self.pages += 1
        self.paging_s += time.perf_counter() - t1
        self.execute_s += t1 - t0
        self.cpu_s += cpu1.user + cpu1.system - cpu0.user - cpu0.system
        self.bytes += end - start
