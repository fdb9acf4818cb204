"""Ours against the peers on the figures they share, samples interleaved round by round.

Figures: a ``true`` round trip; create -> first answer; 10 MB of ``base64`` output, wall time until
the command is done (and the same unwrapped, ``base64 -w0``, one line written in big blocks; both
with the host floors, no Docker: the command into a pty, ours' floor, and into a pipe, what the
one-shot peers give it: ``bench.host_floor``); the first screen read after 10 MB of history;
starting ``python3 -q`` in the background until its ``>>>`` prompt. Each round takes one sample
from ours (the Python API), then from every peer in a rotating order: ``docker exec`` (CLI) and
docker-py ``exec_run`` as one-shot references, and llm-sandbox, SWE-ReX (persistent bash and
one-shot) and terminal-bench's tmux harness, each in its own subprocess and venv (``bench.peers``).
A peer that cannot be installed or started is skipped with its reason (in ``params.peers``); one
that has no such figure gets no row. ``--smoke`` installs nothing: it uses the peers already
installed.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from typing import Any, Protocol

from bench import host_floor
from bench.context import Context
from bench.figures.common import open_session, timed_execute
from bench.floor import shared_floor_container
from bench.peers.client import PeerError, PeerProcess, PeerSkip
from bench.peers.install import CACHE, PEERS, PeerUnavailable, ensure
from bench.stats import Row, compare
from sandbox.session.manager import SessionManager
from sandbox.session.session import Session

# (label, peer, mode) of every peer that runs in a subprocess
RUNS = (
    ("llm-sandbox", "llm-sandbox", ""),
    ("SWE-ReX bash", "swe-rex", "bash"),
    ("SWE-ReX one-shot", "swe-rex", "oneshot"),
    ("terminal-bench tmux", "terminal-bench", ""),
)


class Participant(Protocol):
    label: str

    def ask(self, op: str, timeout_s: float = 300, **params: Any) -> float: ...


def _base64(nbytes: int, *, wrap: bool = True) -> str:
    """``nbytes`` of base64: 77-byte lines (one write each on a terminal) or, unwrapped, one
    line written in big blocks."""
    return f"head -c {nbytes * 3 // 4} /dev/urandom | base64" + ("" if wrap else " -w0")


def _bulk(op: str, params: dict[str, Any]) -> str:
    return _base64(params["bytes"], wrap=op == "bulk")


class Ours:
    label = "ours"

    def __init__(self, ctx: Context, manager: SessionManager, session: Session) -> None:
        self.ctx, self.manager, self.session = ctx, manager, session

    def ask(self, op: str, timeout_s: float = 300, **params: Any) -> float:
        if op == "true":
            return timed_execute(self.session, "true")
        if op == "create":
            project = self.ctx.env.project("peers-create")
            t0 = time.perf_counter()
            fresh = open_session(self.manager, project)
            timed_execute(fresh, "true")
            ms = (time.perf_counter() - t0) * 1000
            self.manager.destroy(fresh.id, force=True)  # not timed
            return ms
        if op in ("bulk", "bulk_w0"):
            t0 = time.perf_counter()
            result = self.session.execute(_bulk(op, params), timeout_s=300, max_lines=3)
            if result.exit_code != 0:
                raise PeerError(f"ours: {result.model_dump(exclude={'output'})}")
            return (time.perf_counter() - t0) * 1000
        if op == "screen":
            self.session.execute(_base64(params["bytes"]), timeout_s=300, max_lines=3)
            t0 = time.perf_counter()
            self.session.read(view="screen")
            return (time.perf_counter() - t0) * 1000
        return self._repl()

    def _repl(self) -> float:
        t0 = time.perf_counter()
        result = self.session.execute("python3 -q", timeout_s=10, background=True)
        ms = (time.perf_counter() - t0) * 1000
        if not result.output.endswith(">>> "):
            raise PeerError(f"ours: no prompt: {result.output[-200:]!r}")
        self.session.send(text="exit()\n")
        if not self.session.wait_done(5.0):
            raise PeerError("ours: python3 did not exit")
        return ms


class OneShot:
    """``docker exec`` (CLI) or docker-py ``exec_run`` in the run's idle floor container."""

    def __init__(self, ctx: Context, *, cli: bool) -> None:
        self.label = "docker exec (CLI)" if cli else "docker-py exec_run"
        self.cli, self.ctx = cli, ctx
        self.cid = shared_floor_container(ctx.env)

    def _run(self, command: str) -> None:
        if self.cli:
            subprocess.run(
                ["docker", "exec", self.cid, "sh", "-c", command], check=True, capture_output=True
            )
            return
        result = self.ctx.env.client.containers.get(self.cid).exec_run(["sh", "-c", command])
        if result.exit_code != 0:
            raise PeerError(f"{self.label}: exit {result.exit_code}")

    def ask(self, op: str, timeout_s: float = 300, **params: Any) -> float:
        if op not in ("true", "bulk", "bulk_w0"):
            raise PeerSkip("a one-shot exec has no session")
        command = "true" if op == "true" else _bulk(op, params)
        t0 = time.perf_counter()
        self._run(command)
        return (time.perf_counter() - t0) * 1000


class HostFloor:
    """The bulk command on the host, no Docker: into a pty (the floor of every terminal-based
    tool: the program line-buffers, the kernel's pty moves each write) or into a pipe (what
    the one-shot peers give it). Not a peer: the pty one is the bulk rows' floor."""

    def __init__(self, *, pty: bool) -> None:
        self.pty = pty
        self.label = "host pty, no Docker" if pty else "host pipe, no Docker"

    def ask(self, op: str, timeout_s: float = 300, **params: Any) -> float:
        if op not in ("bulk", "bulk_w0"):
            raise PeerSkip("a floor of bulk output only")
        command = _bulk(op, params)
        ms, _ = host_floor.pty_ms(command) if self.pty else host_floor.pipe_ms(command)
        return ms


@contextlib.contextmanager
def _peer_processes(ctx: Context) -> Iterator[list[PeerProcess]]:
    """Install (unless smoke) and start every peer; the unavailable ones go to params."""
    reasons: dict[str, str] = ctx.params.setdefault("peers", {})
    started: list[PeerProcess] = []
    image = ctx.env.config().image
    try:
        for label, name, mode in RUNS:
            peer = PEERS[name]
            if ctx.smoke and not (CACHE / name / "ready.json").exists():
                reasons[label] = "not installed (--smoke installs nothing)"
                continue
            try:
                ctx.log(f"{label}: install (cached after the first run) and start")
                ready = ensure(ctx.env.client, peer, image)
                config = {"image": ready.image, "labels": ctx.env.labels, "mode": mode}
                proc = PeerProcess(label, ready, config, CACHE / f"{name}.run.log")
                started.append(proc)
                proc.wait_ready()
                reasons[label] = f"ok ({ready.image})"
            except (PeerUnavailable, PeerError) as exc:
                reasons[label] = str(exc)
                ctx.log(f"{label} skipped: {exc}")
        yield [p for p in started if reasons[p.label].startswith("ok")]
    finally:
        for proc in started:
            proc.close()


# (op, title, samples in a full run, in a smoke run); bulk and screen get ``bytes``
FIGURES = (
    ("true", "`true` round trip", 30, 3),
    ("create", "create -> first answer", 5, 1),
    ("bulk", "{mb} MB of base64, wall", 5, 1),
    ("bulk_w0", "{mb} MB of base64 -w0 (big writes), wall", 5, 1),
    ("screen", "first screen read after {mb} MB", 3, 1),
    ("repl", "`python3 -q` in background until >>>", 5, 1),
)


def run(ctx: Context) -> None:
    with ctx.env.manager() as manager, _peer_processes(ctx) as procs:
        session = open_session(manager, ctx.env.project("peers"), rows=40, cols=120)
        everyone: list[Participant] = [Ours(ctx, manager, session)]
        everyone += [OneShot(ctx, cli=True), OneShot(ctx, cli=False), *procs]
        everyone += [HostFloor(pty=True), HostFloor(pty=False)]
        params = {"bytes": ctx.size(10_000_000, 200_000)}
        ctx.params["bytes"] = params["bytes"]
        for op, title, full, smoke in FIGURES:
            title = title.format(mb=f"{params['bytes'] / 1e6:.3g}")
            _figure(ctx, everyone, op, title, ctx.size(full, smoke), params)


def _figure(
    ctx: Context, everyone: list[Participant], op: str, title: str, n: int, params: dict[str, Any]
) -> None:
    ctx.log(f"{title}: {n} interleaved rounds")
    samples: dict[str, list[float]] = {p.label: [] for p in everyone}
    absent: dict[str, str] = {}
    for i in range(n):
        rest = everyone[1:]
        for p in [everyone[0], *rest[i % max(len(rest), 1) :], *rest[: i % max(len(rest), 1)]]:
            if p.label in absent:
                continue
            try:
                samples[p.label].append(p.ask(op, **params))
            except PeerSkip as exc:
                absent[p.label] = f"skipped: {exc}"
            except PeerError as exc:
                if p.label == "ours":
                    raise
                absent[p.label] = f"failed: {exc}"
                ctx.log(f"{p.label} {absent[p.label]}")
    ours = ctx.add(Row(ctx.figure, f"{title} (ours, Python API)", "ms", samples=samples["ours"]))
    for p in everyone[1:]:
        if samples[p.label] and isinstance(p, HostFloor):
            row = ctx.add(
                Row(
                    ctx.figure,
                    f"{title}: {p.label}",
                    "ms",
                    role="floor" if p.pty else "info",
                    samples=samples[p.label],
                    note="the same command, its stdout a "
                    + ("terminal (ONLCR on)" if p.pty else "pipe: it writes big blocks"),
                )
            )
            if p.pty:
                compare(ours, row)
        elif samples[p.label]:
            ctx.add(
                Row(
                    ctx.figure,
                    f"{title}: {p.label}",
                    "ms",
                    role="peer",
                    samples=samples[p.label],
                    peer_of=ours.name,
                    note=absent.get(p.label, ""),
                )
            )
    ctx.params.setdefault("absent", {})[op] = absent
