"""The README's bench table, from one run's JSON: each figure with its floor and best peer.

``python -m bench.report bench/results/<run>.json`` prints a Markdown table with one line per
measured result (the rows with a target, and the peers figure's rows of ours): our median (and
p99 where it was sampled), the floor measured in the same run with our ratio to it, the best
peer measured against the same row in the same run, the target and whether it was met. Floors,
peers and info rows appear only as the columns of the result they belong to; a skipped figure is
one line with its reason.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.stats import Row, best_peer, format_value, table_ratio

HEAD = ["figure", "ours", "floor in the same run", "ratio", "best peer", "target", "met"]


def row_of(data: dict[str, Any]) -> Row:
    """A row read back from the JSON (samples included, so percentiles are recomputed)."""
    return Row(
        figure=data["figure"],
        name=data["name"],
        unit=data["unit"],
        role=data["role"],
        samples=list(data.get("samples") or []),
        value=data["median"] if not data.get("samples") else None,
        floor=data.get("floor"),
        ratio=data.get("ratio"),
        target=data.get("target"),
        met=data.get("met"),
        note=data.get("note") or "",
        skipped=data.get("skipped"),
        peer_of=data.get("peer_of"),
    )


def _ours(row: Row) -> str:
    text = format_value(row.median, row.unit)
    if row.p99 is not None and row.unit == "ms":
        text += f" (p99 {format_value(row.p99, row.unit)})"
    return text


def _floor(row: Row, by_name: dict[str, Row]) -> str:
    floor = by_name.get(row.floor or "")
    if floor is None:
        return ""
    return f"{floor.name}: {format_value(floor.median, floor.unit)}"


def _peer(row: Row, rows: Sequence[Row]) -> str:
    best = best_peer(row, rows)
    if best is None:
        return ""
    return f"{best.name.rsplit(': ', 1)[-1]}: {format_value(best.median, best.unit)}"


def markdown(rows: Sequence[Row]) -> str:
    by_name = {r.name: r for r in rows}
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    for r in rows:
        if r.skipped is not None:
            lines.append(f"| {r.figure}: {r.name} | skipped: {r.skipped} | | | | | |")
            continue
        if r.role != "result" or (r.target is None and best_peer(r, rows) is None):
            continue
        met = {True: "yes", False: "**no**", None: ""}[r.met]
        cells = [
            f"{r.figure}: {r.name}",
            _ours(r),
            _floor(r, by_name),
            table_ratio(r),
            _peer(r, rows),
            r.target or "",
            met,
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def load(path: Path) -> tuple[dict[str, Any], list[Row]]:
    report = json.loads(path.read_text())
    rows = [row_of(r) for fig in report["figures"].values() for r in fig["rows"]]
    return report, rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.report", description=__doc__.split("\n")[0]
    )
    parser.add_argument("results", type=Path, help="a run's JSON (bench/results/<run>.json)")
    args = parser.parse_args(argv)
    report, rows = load(args.results)
    m = report.get("machine", {})
    print(
        f"Run {report.get('started_at')} to {report.get('finished_at')}, commit "
        f"{m.get('git_commit', '?')}, {m.get('cpus')} cores, docker {m.get('docker')}, "
        f"load average at the start {m.get('load_avg')}, mode {report.get('mode')}.\n"
    )
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
