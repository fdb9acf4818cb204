"""What a signed-in person can do to one of their sessions (POST ``/ui/api/sessions/ID/ACT``):
take it over and release it, type into it and fit it to their window while they hold it, and
stop its foreground job with the ladder. Each takes the JSON body and returns the JSON answer;
a bad body raises ``ValueError`` (400), an engine refusal ``SandboxError`` (409)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from sandbox.web import security

if TYPE_CHECKING:
    from starlette.responses import Response

    from sandbox.session.session import Session

log = logging.getLogger(__name__)

SIGNALS = ("INT", "TERM", "KILL")
MAX_INPUT_CHARS = 64 * 1024

Body = dict[str, Any]
Action = Callable[["Session", str, Body], Awaitable[Any]]


async def takeover(session: Session, who: str, body: Body) -> Any:
    if body.get("hold") is True:
        session.takeover.take(who)  # or renew the hold
        log.info("web view: %s holds session %s", who, session.id)
    else:
        session.takeover.release()
        log.info("web view: %s released session %s", who, session.id)
    return {"held": session.takeover.holder is not None}


async def type_in(session: Session, who: str, body: Body) -> Any:
    data = body.get("data")
    if not isinstance(data, str) or not data or len(data) > MAX_INPUT_CHARS:
        raise ValueError(f"data must be 1..{MAX_INPUT_CHARS} characters of text")
    raw = data.encode("utf-8")
    await anyio.to_thread.run_sync(session.write_raw, raw)
    session.takeover.typed(data)
    return {"bytes_sent": len(raw)}


async def fit(session: Session, who: str, body: Body) -> Any:
    rows, cols = body.get("rows"), body.get("cols")
    if not (isinstance(rows, int) and isinstance(cols, int)):
        raise ValueError("rows and cols must be integers")
    resized = await anyio.to_thread.run_sync(session.resize, rows, cols)
    return resized.model_dump(mode="json")


async def stop(session: Session, who: str, body: Body) -> Any:
    sig = body.get("signal")
    if sig not in SIGNALS:
        raise ValueError(f"signal must be one of {', '.join(SIGNALS)}")
    log.info("web view: %s sent %s to session %s", who, sig, session.id)
    result = await anyio.to_thread.run_sync(session.signal, sig)
    return result.model_dump(mode="json")


ACTIONS: dict[str, Action] = {"takeover": takeover, "input": type_in, "resize": fit, "signal": stop}
NEEDS_HOLD = ("input", "resize")


def not_held() -> Response:
    return security.refusal(
        409,
        "NOT_HELD",
        "take over the session before typing into it or resizing it",
        "Press Take over: the agent then waits until you release it.",
    )
