"""What a session was created with: the create fields of the contract, fixed for its life."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import Field

from sandbox.models import SessionFields


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class SessionSpec(SessionFields):
    """What a session was created with: the contract's create fields, plus the shell's user and
    base environment, which stay on the server."""

    user: str  # "uid:gid" of the shell
    env: dict[str, str] = Field(default_factory=dict)
