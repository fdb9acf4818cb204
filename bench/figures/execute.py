"""execute of ``true`` and ``echo hi`` through the Python API, against the raw marker round trip.

Floor: ``CMD; printf MARKER`` typed into ``bash --norc`` on our own bare TTY exec socket (see
``bench.floor.RawShell``); both are builtins, so this is the marker round trip itself. Peer:
``docker exec CID true`` via the CLI. Engine and floor samples are interleaved so drift in the
machine's load hits both alike. Target: p50 <= 3x the floor.
"""

from __future__ import annotations

from bench.context import Context
from bench.figures.common import docker_exec_cli_row, open_session, timed_execute
from bench.floor import RawShell, shared_floor_container
from bench.stats import Row, compare, judge

COMMANDS = ("true", "echo hi")


def run(ctx: Context) -> None:
    n = ctx.size(300, 20)
    warmup = ctx.size(20, 3)
    ctx.params.update(samples=n, warmup=warmup)
    env = ctx.env
    with env.manager() as manager:
        session = open_session(manager, env.project("execute"))
        raw = RawShell(env.api, shared_floor_container(env))
        try:
            raw.round_trip()  # bash is up
            for command in COMMANDS:
                ctx.log(f"execute {command!r} vs raw marker round trip, {n} samples each")
                check = session.execute(command, timeout_s=10)
                expected = "hi\n" if command == "echo hi" else ""
                if check.output != expected or check.exit_code != 0:
                    raise RuntimeError(f"execute {command!r} returned {check.model_dump()}")
                for _ in range(warmup):
                    timed_execute(session, command)
                    raw.round_trip(f"{command}; ")
                engine: list[float] = []
                floor: list[float] = []
                for _ in range(n):
                    engine.append(timed_execute(session, command))
                    floor.append(raw.round_trip(f"{command}; ") * 1000)
                f = ctx.add(
                    Row(
                        ctx.figure,
                        f"raw TTY marker rt `{command}`",
                        "ms",
                        role="floor",
                        samples=floor,
                    )
                )
                r = ctx.add(
                    Row(ctx.figure, f"execute `{command}` (Python API)", "ms", samples=engine)
                )
                ratio = compare(r, f)
                judge(r, "p50 <= 3x floor", None if ratio is None else ratio <= 3)
        finally:
            raw.close()
    docker_exec_cli_row(ctx)
