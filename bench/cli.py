"""``python -m bench``: measure every figure next to its floor, print a table, write JSON.

Figures (``--only NAME``, repeatable): execute, mcp, output, create, screen, interactive, scale,
gvisor, egress; see their modules in ``bench/figures``. ``--peers`` adds the ``peers`` figure
(ours against llm-sandbox, SWE-ReX, terminal-bench's tmux harness and one-shot execs, installed
on first use into ``bench/.peers``; see ``bench/figures/peers.py``). ``--smoke`` runs each
with tiny sizes and counts (well under a minute) so CI notices when the bench rots; it never
judges times, and installs no peer. Exit status: 0 when every figure ran or was skipped with a
reason, 1 when one failed, 130 on Ctrl-C.
Every container of the run is removed by its owner label on every exit path.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from bench.context import Context, FigureSkipped
from bench.env import BenchEnv
from bench.figures import FIGURES, PEERS_FIGURE
from bench.stats import Row, table

RESULTS = Path(__file__).resolve().parent / "results"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (CI); no time targets")
    parser.add_argument(
        "--only",
        action="append",
        choices=list(FIGURES),
        metavar="NAME",
        help=f"run only this figure (repeatable): {', '.join(FIGURES)}",
    )
    parser.add_argument(
        "--peers",
        action="store_true",
        help="also measure the peers (installs them into bench/.peers on first use)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="PATH",
        help="write the results here (default bench/results/<timestamp>.json)",
    )
    return parser


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "platform": platform.platform(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["mem_gib"] = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        info["load_avg"] = [round(x, 2) for x in os.getloadavg()]
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        info["git_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parents[1],
        ).stdout.strip()
    return info


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    names = args.only or list(FIGURES)
    figures = dict(FIGURES)
    if args.peers:
        figures["peers"] = PEERS_FIGURE
        names = [*(args.only or list(FIGURES)), "peers"]
    signal.signal(signal.SIGTERM, _on_sigterm)
    started = datetime.now(UTC)
    out_path = args.json or RESULTS / f"{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    report: dict[str, Any] = {
        "version": 1,
        "started_at": started.isoformat(timespec="seconds"),
        "mode": "smoke" if args.smoke else "full",
        "machine": machine(),
        "figures": {},
    }
    rows: list[Row] = []
    failed = False
    interrupted = False
    env: BenchEnv | None = None
    try:
        env = BenchEnv()
        report["owner"] = env.owner
        report["machine"]["docker"] = env.client.version().get("Version")
        print(f"bench run {env.owner} ({report['mode']}): {', '.join(names)}", file=sys.stderr)
        for name in names:
            ctx = Context(env=env, smoke=args.smoke, figure=name)
            t0 = time.monotonic()
            status, error = "ok", None
            try:
                figures[name](ctx)
            except FigureSkipped as exc:
                status, error = "skipped", str(exc)
                ctx.add(Row(name, "(figure skipped)", "", skipped=error[:300]))
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                status, error = "error", f"{type(exc).__name__}: {exc}"
                failed = True
                traceback.print_exc()
                ctx.add(Row(name, "(figure failed)", "", skipped=error[:300]))
            ctx.log(f"{status} in {time.monotonic() - t0:.1f} s")
            if args.smoke:  # smoke sizes say nothing about speed: never judge them
                for row in ctx.rows:
                    row.met = None
            rows += ctx.rows
            report["figures"][name] = {
                "status": status,
                "error": error,
                "seconds": round(time.monotonic() - t0, 1),
                "params": ctx.params,
                "rows": [r.to_json() for r in ctx.rows],
            }
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: cleaning up", file=sys.stderr)
    except Exception as exc:  # no engine, or the bench itself broke outside a figure
        failed = True
        traceback.print_exc()
        report["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # let cleanup finish
        try:
            if env is not None:
                removed = env.cleanup()
                if removed:
                    print(
                        f"cleanup: removed {removed} container(s) labelled {env.owner}",
                        file=sys.stderr,
                    )
        finally:
            signal.signal(signal.SIGINT, previous)
    report["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    m = report["machine"]
    print(
        f"\nmachine: {m.get('cpus')} cores ({m.get('cpu_model', '?')}), {m.get('mem_gib')} GiB, "
        f"docker {m.get('docker')}, python {m.get('python')}; mode {report['mode']}"
    )
    print(table(rows))
    from bench.figures.common import RACES

    report["create_races"] = RACES
    if RACES:
        print(
            f"\n{len(RACES)} session create(s) retried: their container was removed mid-create "
            f"by another server's start-up gc (e.g. {RACES[0]})"
        )
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nresults: {out_path}")
    if interrupted:
        return 130
    return 1 if failed else 0
