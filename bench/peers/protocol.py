"""The drivers' side of the JSON-lines protocol (stdlib only: it runs in a peer's venv).

The bench writes one request a line on the driver's stdin, ``{"op": NAME, ...}``; the driver
answers one line on stdout: ``{"ms": TIME}``, ``{"skip": REASON}`` (this peer has no such
thing) or ``{"error": MESSAGE}``. The first line a driver prints is ``{"ready": true}`` once its
session is up (or ``{"error": ...}``). Everything else a peer prints goes to stderr.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

Handler = Callable[[dict[str, Any]], "float | str | None"]


def _say(obj: dict[str, Any], out: Any) -> None:
    out.write(json.dumps(obj) + "\n")
    out.flush()


def serve(
    start: Callable[[], None], handlers: dict[str, Handler], stop: Callable[[], None]
) -> None:
    """Start the peer's session, then answer requests until stdin closes; always ``stop``."""
    out = sys.stdout
    sys.stdout = sys.stderr  # a peer's own prints must not break the protocol
    try:
        try:
            start()
        except Exception as exc:
            traceback.print_exc()
            _say({"error": f"{type(exc).__name__}: {exc}"}, out)
            return
        _say({"ready": True}, out)
        for line in sys.stdin:
            request = json.loads(line)
            handler = handlers.get(request["op"])
            if handler is None:
                _say({"skip": f"no {request['op']} in this peer"}, out)
                continue
            try:
                result = handler(request)
            except Exception as exc:
                traceback.print_exc()
                _say({"error": f"{type(exc).__name__}: {exc}"[:500]}, out)
                continue
            _say({"skip": result} if isinstance(result, str) else {"ms": result}, out)
    finally:
        stop()


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000
