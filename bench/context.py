"""What a figure function gets: the run's environment, its size mode, and where rows go."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

from bench.env import BenchEnv
from bench.stats import Row

T = TypeVar("T")


class FigureSkipped(Exception):
    """Raised by a figure that cannot run here (the reason is recorded, the run goes on)."""


@dataclass
class Context:
    env: BenchEnv
    smoke: bool
    figure: str
    rows: list[Row] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    _t0: float = field(default_factory=time.monotonic)

    def size(self, full: T, smoke: T) -> T:
        return smoke if self.smoke else full

    def add(self, row: Row) -> Row:
        row.figure = self.figure
        self.rows.append(row)
        return row

    def log(self, message: str) -> None:
        print(f"[{time.monotonic() - self._t0:6.1f}s {self.figure}] {message}", file=sys.stderr)
