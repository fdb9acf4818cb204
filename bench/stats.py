"""Rows of results, their percentiles, targets, and the printed table.

A ``Row`` is one measured figure: either ``samples`` (times in ms, many of them) or a single
``value`` (a rate in MB/s, a memory size in MiB). Its ``role`` says what it is: ``result`` (an
engine figure with a target), ``floor`` (the same work done the cheapest way we know, measured
in the same run), ``peer`` (what people use instead, e.g. ``docker exec``) or ``info``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation; NaN for no values."""
    xs = sorted(values)
    if not xs:
        return math.nan
    k = (len(xs) - 1) * q / 100
    lo = math.floor(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


@dataclass
class Row:
    figure: str
    name: str
    unit: str  # "ms", "MB/s", "MiB", ...
    role: str = "result"  # result | floor | peer | info
    samples: list[float] = field(default_factory=list)
    value: float | None = None
    floor: str | None = None  # the name of the row this one is compared with
    ratio: float | None = None  # time: this / floor (x slower); rate: this / floor (fraction)
    ratio_of: str = "median"  # the statistic the ratio compares: "median" or "p99"
    target: str | None = None
    met: bool | None = None
    note: str = ""
    skipped: str | None = None
    peer_of: str | None = None  # a peer's row: the name of our row it is measured against

    @property
    def n(self) -> int:
        return len(self.samples) if self.samples else (1 if self.value is not None else 0)

    @property
    def median(self) -> float | None:
        return percentile(self.samples, 50) if self.samples else self.value

    @property
    def p90(self) -> float | None:
        return percentile(self.samples, 90) if len(self.samples) > 1 else None

    @property
    def p99(self) -> float | None:
        return percentile(self.samples, 99) if len(self.samples) > 1 else None

    def to_json(self) -> dict[str, Any]:
        return {
            "figure": self.figure,
            "name": self.name,
            "unit": self.unit,
            "role": self.role,
            "n": self.n,
            "median": _round(self.median),
            "p90": _round(self.p90),
            "p99": _round(self.p99),
            "min": _round(min(self.samples)) if self.samples else None,
            "max": _round(max(self.samples)) if self.samples else None,
            "floor": self.floor,
            "ratio": _round(self.ratio),
            "ratio_of": self.ratio_of,
            "target": self.target,
            "met": self.met,
            "note": self.note,
            "skipped": self.skipped,
            "peer_of": self.peer_of,
            "samples": [_round(s) for s in self.samples],
        }


def _round(x: float | None) -> float | None:
    if x is None or math.isnan(x):
        return None
    return float(f"{x:.4g}")


def compare(
    row: Row,
    floor: Row,
    *,
    higher_is_better: bool = False,
    stat: Literal["median", "p99"] = "median",
) -> float | None:
    """Set ``row.floor`` and ``row.ratio`` against ``floor`` (their medians, or with ``stat``
    "p99" their 99th percentiles); return the ratio."""
    row.floor = floor.name
    row.ratio_of = stat
    a, b = (row.p99, floor.p99) if stat == "p99" else (row.median, floor.median)
    if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
        return None
    row.ratio = a / b
    return row.ratio


def judge(row: Row, target: str, met: bool | None) -> None:
    row.target = target
    row.met = met


# -- the table ------------------------------------------------------------------------------
def format_value(x: float | None, unit: str) -> str:
    if x is None or math.isnan(x):
        return "-"
    if unit == "ms":
        if x >= 1000:
            return f"{x / 1000:.2f} s"
        if x >= 100:
            return f"{x:.0f} ms"
        if x >= 10:
            return f"{x:.1f} ms"
        return f"{x:.2f} ms"
    if abs(x) >= 100:
        return f"{x:.0f} {unit}"
    return f"{x:.1f} {unit}" if abs(x) >= 10 else f"{x:.2f} {unit}"


def table_ratio(row: Row) -> str:
    if row.ratio is None:
        return ""
    text = f"{row.ratio:.2f}x" if row.ratio < 10 else f"{row.ratio:.0f}x"
    return text if row.ratio_of == "median" else f"{text} {row.ratio_of}"


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


def best_peer(row: Row, rows: Iterable[Row]) -> Row | None:
    """The peer row measured against ``row`` with the best median (lowest time, highest rate)."""
    peers = [p for p in rows if p.peer_of == row.name and p.median is not None]
    if not peers:
        return None
    pick = min if row.unit == "ms" else max
    return pick(peers, key=lambda p: p.median or 0.0)


def _best(row: Row, rows: Sequence[Row]) -> str:
    best = best_peer(row, rows)
    if best is None:
        return ""
    label = best.name.rsplit(": ", 1)[-1]
    return f"{_short(label, 20)} {format_value(best.median, best.unit)}"


def table(rows: Iterable[Row]) -> str:
    rows = list(rows)
    head = ["figure", "measurement", "n", "median", "p90", "p99", "vs", "ratio", "target", "ok"]
    if any(r.peer_of for r in rows):
        head.append("best peer")
    lines: list[list[str] | str] = []
    for r in rows:
        if r.skipped is not None:
            cells = [r.figure, r.name, "", "skipped", "", "", "", "", r.target or "", "-"]
            lines.append(cells + [""] * (len(head) - len(cells)))
            lines.append(f"skipped: {r.skipped}")
            continue
        ok = {True: "yes", False: "NO", None: ""}[r.met]
        role = "" if r.role == "result" else f"[{r.role}] "
        lines.append(
            [
                r.figure,
                role + r.name,
                str(r.n) if r.n else "",
                format_value(r.median, r.unit),
                format_value(r.p90, r.unit) if r.p90 is not None else "",
                format_value(r.p99, r.unit) if r.p99 is not None else "",
                _short(r.floor or "", 28),
                table_ratio(r),
                r.target or "",
                ok,
                *([_best(r, rows)] if len(head) > 10 else []),
            ]
        )
        if r.note:
            lines.append(r.note)
    widths = [len(h) for h in head]
    for line in lines:
        if isinstance(line, list):
            widths = [max(w, len(c)) for w, c in zip(widths, line, strict=True)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    out.append("  ".join("-" * w for w in widths))
    indent = " " * (widths[0] + 4)
    for line in lines:
        if isinstance(line, str):
            out.append(indent + "^ " + line)
        else:
            out.append("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    return "\n".join(out)
