"""Start a REPL in the background and get its prompt: ``execute("python3 -q", background=True)``.

Each sample starts ``python3 -q`` through the documented call and times it until ``execute``
returns with the prompt (it must say ``waiting_for_input``). The floor, from the same sample, is
when the prompt's bytes reached the session's log: the program's own start-up, which no
terminal can beat. The difference is what deciding "it waits for input" costs. A first,
unmeasured start also starts the session's input watcher (a second exec; until it answers, the
silence rule applies). Target: the prompt back in <= 150 ms (p50), and the result says why it
returned.
"""

from __future__ import annotations

import time

from bench.context import Context
from bench.figures.common import open_session
from bench.stats import Row, compare, judge
from sandbox.session.session import Session

PROGRAM = "python3 -q"


def run(ctx: Context) -> None:
    n = ctx.size(20, 3)
    ctx.params.update(samples=n, program=PROGRAM)
    returned: list[float] = []
    prompt: list[float] = []
    with ctx.env.manager() as manager:
        session = open_session(manager, ctx.env.project("interactive"))
        ctx.log(f"{n} x background execute {PROGRAM!r} until its prompt")
        _sample(session, warmup=True)  # a session's first one also starts its input watcher
        for _ in range(n):
            total, shown = _sample(session)
            returned.append(total)
            prompt.append(shown)
    f = ctx.add(Row(ctx.figure, "the prompt reaches the log", "ms", role="floor", samples=prompt))
    r = ctx.add(
        Row(ctx.figure, f"background execute `{PROGRAM}` until its prompt", "ms", samples=returned)
    )
    compare(r, f)
    judge(r, "p50 <= 150 ms", (r.median or 0) <= 150)


def _sample(session: Session, *, warmup: bool = False) -> tuple[float, float]:
    """(ms until execute returned, ms until the prompt was in the log)."""
    t0 = time.monotonic()
    result = session.execute(PROGRAM, timeout_s=10, background=True)
    total = (time.monotonic() - t0) * 1000
    if not result.output.endswith(">>> ") or not (result.waiting_for_input or warmup):
        raise RuntimeError(f"execute returned {result.model_dump()}")
    # the reader's clock of the last chunk: the prompt, since the program prints nothing after
    shown = (session.link.last_output - t0) * 1000
    session.send(text="exit()\n")
    if not session.wait_done(5.0):
        raise RuntimeError(f"{PROGRAM} did not exit")
    return total, shown
