"""One line of ``sandbox doctor``: a check's name, its status, what it saw and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "FAIL", "warn", "info", "skip"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str = ""
    fix: str = ""
    required: bool = True

    @property
    def passed(self) -> bool:
        return self.status != "FAIL" or not self.required

    def render(self) -> str:
        line = f"{self.status:<5} {self.name}" + (f": {self.detail}" if self.detail else "")
        if self.fix and self.status in ("FAIL", "warn"):
            line += f"\n      fix: {self.fix}"
        elif self.fix and self.status == "info":
            line += f"\n      how: {self.fix}"
        return line


def exit_code(checks: list[Check]) -> int:
    return 0 if all(c.passed for c in checks) else 1
