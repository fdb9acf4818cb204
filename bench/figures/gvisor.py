"""What the gVisor tier costs: the same sessions on ``runsc`` against ``runc``, in one run.

Four figures, each measured on both runtimes with their samples interleaved (runc, runsc,
runc, ...) so the machine's drift hits both alike; the runc row is the runsc row's floor:

- cold create: ``SessionManager.create`` until the shell answers (no pool);
- ``execute true``: the marker round trip through the session's TTY shell;
- output: ``execute`` of base64 text (every byte through the pty, the reader and the log), MB/s;
- host memory per idle session: the resident memory of every host process that belongs to the
  container (its shim, and under gVisor the sandbox and gofer) or runs in its cgroup, MiB.

Skipped, with the reason, where the engine has no ``runsc`` runtime registered.
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.context import Context, FigureSkipped
from bench.figures.common import open_session, timed_execute
from bench.stats import Row, compare
from sandbox.session.manager import SessionManager
from sandbox.session.session import Session

RUNTIMES = ("runc", "runsc")


def run(ctx: Context) -> None:
    registered = (ctx.env.client.info().get("Runtimes") or {}).keys()
    if "runsc" not in registered:
        raise FigureSkipped(
            f"the engine has no runsc runtime (it has: {', '.join(sorted(registered))}); "
            "scripts/engine.sh registers Debian's where it provisions the engine"
        )
    creates = ctx.size(8, 1)
    trips = ctx.size(200, 10)
    out_mb = ctx.size(8, 1)
    ctx.params.update(creates=creates, round_trips=trips, output_mb=out_mb)
    env = ctx.env
    with env.manager(allowed_runtimes=("runsc",)) as manager:
        project = env.project("gvisor")
        samples: dict[tuple[str, str], list[float]] = {}

        def add(what: str, runtime: str, value: float) -> None:
            samples.setdefault((what, runtime), []).append(value)

        ctx.log(f"cold create x{creates} per runtime")
        for _ in range(creates):
            for runtime in RUNTIMES:
                t0 = time.perf_counter()
                session = _open(manager, project, runtime)
                timed_execute(session, "true")
                add("create", runtime, (time.perf_counter() - t0) * 1000)
                manager.destroy(session.id, force=True)
        sessions = {rt: _open(manager, project, rt) for rt in RUNTIMES}
        try:
            for session in sessions.values():
                for _ in range(5):
                    timed_execute(session, "true")
            ctx.log(f"execute true x{trips} per runtime")
            for _ in range(trips):
                for runtime, session in sessions.items():
                    add("execute", runtime, timed_execute(session, "true"))
            ctx.log(f"{out_mb} MB of base64 output per runtime")
            for _ in range(3):
                for runtime, session in sessions.items():
                    add("output", runtime, _throughput(session, out_mb))
            time.sleep(1.0)  # idle: what a session holds while it waits for the agent
            for runtime, session in sessions.items():
                add("memory", runtime, host_rss_mib(session.container_id))
        finally:
            for session in sessions.values():
                manager.destroy(session.id, force=True)
    units = {"create": "ms", "execute": "ms", "output": "MB/s", "memory": "MiB"}
    names = {
        "create": "cold create until the shell answers",
        "execute": "execute `true`",
        "output": f"{out_mb} MB base64 output through execute",
        "memory": "host memory per idle session",
    }
    for what, unit in units.items():
        floor = ctx.add(
            Row(
                ctx.figure,
                f"{names[what]} (runc)",
                unit,
                role="floor",
                samples=samples[(what, "runc")],
            )
        )
        row = ctx.add(
            Row(ctx.figure, f"{names[what]} (runsc)", unit, samples=samples[(what, "runsc")])
        )
        compare(row, floor, higher_is_better=unit == "MB/s")


def _open(manager: SessionManager, project: Path, runtime: str) -> Session:
    return open_session(manager, project, runtime=None if runtime == "runc" else runtime)


def _throughput(session: Session, mb: int) -> float:
    """MB/s of ``mb`` MB of base64 text (76-column lines) through ``execute``."""
    raw = mb * 1024 * 1024 * 3 // 4
    command = f"head -c {raw} /dev/zero | base64"
    t0 = time.perf_counter()
    result = session.execute(command, timeout_s=300, max_lines=5)
    seconds = time.perf_counter() - t0
    if result.exit_code != 0 or result.timed_out:
        raise RuntimeError(f"{command!r} returned {result.model_dump()}")
    return mb / seconds


def host_rss_mib(container_id: str) -> float:
    """Resident MiB of the host processes that are the container's: its id in their command
    line (the shim; under gVisor the sandbox and gofer) or in their cgroup."""
    total_kib = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            cgroup = (proc / "cgroup").read_text()
            status = (proc / "status").read_text()
        except OSError:
            continue
        if container_id.encode() not in cmdline and container_id not in cgroup:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total_kib += int(line.split()[1])
    return total_kib / 1024
