"""A screen read after a long history: 10 MB of output, and 1,000 commands.

Each repetition of the first part: ``execute`` prints 10 MB (base64 of urandom), then ``top``
starts (a background execute), and once it has drawn its screen and gone quiet,
``read(view="screen")`` is timed: the first screen request after the flood, when the lazy
screen is furthest behind. A second read (nothing new) and, as a floor, a fresh pyte ``Screen``
fed only the program's own bytes are reported beside it. The second part runs 1,000 small
commands (a line of text and a few coloured ``ls`` lines each) and times the first screen read
after them. Target: p99 <= 20 ms for both.
"""

from __future__ import annotations

import time

import pyte

from bench.context import Context
from bench.figures.common import open_session
from bench.stats import Row, compare, judge
from sandbox.session.session import Session

PROGRAM = "top -d 5"


def run(ctx: Context) -> None:
    reps = ctx.size(8, 2)
    size = ctx.size(7_500_000, 150_000)  # base64: 10 MB (200 KB in smoke mode)
    ctx.params.update(repetitions=reps, program=PROGRAM, output_bytes=size * 4 // 3)
    env = ctx.env
    first: list[float] = []
    again: list[float] = []
    pyte_ms: list[float] = []
    with env.manager() as manager:
        session = open_session(manager, env.project("screen"), rows=40, cols=120)
        for i in range(reps):
            ctx.log(f"repetition {i + 1}/{reps}: {size * 4 // 3 / 1e6:.1f} MB, then {PROGRAM}")
            result = session.execute(
                f"head -c {size} /dev/urandom | base64", timeout_s=300, max_lines=3
            )
            if result.exit_code != 0:
                raise RuntimeError(f"execute returned {result.model_dump(exclude={'output'})}")
            started = session.execute(PROGRAM, background=True, timeout_s=0.3)
            program_from = started.log_range.from_byte
            _wait_quiet(session, 0.3, 10.0)
            t0 = time.perf_counter()
            snap = session.read(view="screen")
            first.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            session.read(view="screen")
            again.append((time.perf_counter() - t0) * 1000)
            if "PID" not in snap.content:
                raise RuntimeError(f"{PROGRAM} is not on the screen: {snap.content[:400]!r}")
            own = session.log.read(program_from, session.log.size)
            t0 = time.perf_counter()
            screen = pyte.Screen(120, 40)
            pyte.ByteStream(screen).feed(own)
            pyte_ms.append((time.perf_counter() - t0) * 1000)
            session.send(text="q")
            if not session.wait_done(5.0):
                session.signal("INT")
    f = ctx.add(
        Row(ctx.figure, "pyte feed of top's own bytes", "ms", role="floor", samples=pyte_ms)
    )
    r = ctx.add(
        Row(
            ctx.figure,
            f"read(view=screen), `{PROGRAM}` after {size * 4 // 3 / 1e6:.3g} MB",
            "ms",
            samples=first,
        )
    )
    compare(r, f)
    judge(r, "p99 <= 20 ms", (r.p99 or 0) <= 20)
    ctx.add(
        Row(ctx.figure, "read(view=screen) again, nothing new", "ms", role="info", samples=again)
    )
    _after_commands(ctx)


COMMAND = "echo step {i}; ls --color=always -d /etc /usr /var"


def _after_commands(ctx: Context) -> None:
    reps, count = ctx.size(6, 2), ctx.size(1000, 50)
    ctx.params.update(commands=count, command=COMMAND)
    first: list[float] = []
    with ctx.env.manager() as manager:
        session = open_session(manager, ctx.env.project("screen-commands"), rows=40, cols=120)
        for rep in range(reps):
            ctx.log(f"repetition {rep + 1}/{reps}: {count} commands")
            for i in range(count):
                session.execute(COMMAND.format(i=i), timeout_s=30)
            t0 = time.perf_counter()
            snap = session.read(view="screen")
            first.append((time.perf_counter() - t0) * 1000)
            if f"step {count - 1}" not in snap.content:
                raise RuntimeError(f"the last command is not on the screen: {snap.content!r}")
    r = ctx.add(Row(ctx.figure, f"read(view=screen) after {count} commands", "ms", samples=first))
    judge(r, "p99 <= 20 ms", (r.p99 or 0) <= 20)


def _wait_quiet(session: Session, quiet_s: float, timeout_s: float) -> None:
    """Until the session's log has grown and then not grown for ``quiet_s``."""
    deadline = time.monotonic() + timeout_s
    size, since = session.log.size, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.02)
        now_size = session.log.size
        if now_size != size:
            size, since = now_size, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
    raise RuntimeError("the program never went quiet")
