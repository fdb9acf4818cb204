"""What a session was created with: the create fields of the contract, fixed for its life."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from sandbox.models import Limits


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class SessionSpec:
    """What a session was created with (the create fields of the contract)."""

    session_id: str
    name: str
    image: str
    project_path: str
    workdir: str
    rows: int
    cols: int
    network: bool
    durable: bool
    limits: Limits
    created_at: str
    read_only_project: bool
    command: list[str] | None
    user: str  # "uid:gid" of the shell
    env: dict[str, str] = field(default_factory=dict)
    runtime: str | None = None
    egress: list[str] | None = None  # the allow-list (through the egress proxy), if any
    egress_secret: str = ""  # the session's proxy password
