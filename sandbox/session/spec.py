"""What a session was created with: the create fields of the contract, fixed for its life."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from pydantic import Field

from sandbox.models import SessionFields


def now_iso() -> str:
    return iso_at(time.time())


def iso_at(wall: float) -> str:
    """``time.time()`` value ``wall`` as the contract's timestamps spell it."""
    return datetime.fromtimestamp(wall, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class SessionSpec(SessionFields):
    """What a session was created with: the contract's create fields, plus what stays on the
    server: the shell's user and base environment, and the egress allow-list (public as
    ``egress_allow``) with the session's proxy password."""

    user: str  # "uid:gid" of the shell
    env: dict[str, str] = Field(default_factory=dict)
    egress: list[str] | None = None  # the allow-list (through the egress proxy), if any
    egress_secret: str = ""  # the session's proxy password
