"""What every ``/ui`` response and request passes: headers that lock the page down, and the
Host and Origin checks.

* The Content-Security-Policy allows only this server's own scripts, styles, fonts and
  connections: no inline script, no ``eval``, nothing from elsewhere, no framing. Two
  allowances, both for the bundled libraries: inline *styles* (xterm.js sizes its rows with a
  ``<style>`` element it writes) and ``wasm-unsafe-eval`` (the asciinema player's terminal is
  WebAssembly); neither lets a script run.
* ``Host`` must be an allowed host (DNS-rebinding protection, as on ``/mcp``).
* Every request that changes something (POST) needs an ``Origin`` header of an allowed origin:
  a page elsewhere cannot make a signed-in browser act (the cookie is also ``SameSite=Strict``),
  and a declared body of at most ``MAX_BODY`` bytes (the sign-in form is read before anyone is
  signed in: it must not make the server read much).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

log = logging.getLogger(__name__)

CSP = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self' 'wasm-unsafe-eval'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)

HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
}

Matcher = Callable[[str], bool]
MAX_BODY = 128 * 1024  # typed input is at most 64 Ki characters


def secure(response: Response) -> Response:
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def refusal(status: int, code: str, message: str, hint: str) -> Response:
    body = {"error": {"code": code, "message": message, "hint": hint}}
    return secure(JSONResponse(body, status_code=status))


def check(request: Request, host_ok: Matcher, origin_ok: Matcher) -> Response | None:
    """421 for a foreign Host, 403 for a state-changing request without an allowed Origin."""
    host = request.headers.get("host", "")
    if not host_ok(host):
        log.warning("web view: refused a request with Host %r", host[:100])
        return refusal(
            421,
            "BAD_HOST",
            f"Host {host[:100]!r} is not allowed",
            "Open the page through an allowed host name (SANDBOX_ALLOWED_HOSTS).",
        )
    if request.method in ("GET", "HEAD"):
        return None
    origin = request.headers.get("origin")
    if origin is None or not origin_ok(origin):
        log.warning("web view: refused a %s with Origin %r", request.method, (origin or "")[:100])
        return refusal(
            403,
            "BAD_ORIGIN",
            f"Origin {(origin or '(none)')[:100]!r} may not change anything here",
            "Use the page this server serves; other sites cannot act for you.",
        )
    length = request.headers.get("content-length", "")
    if not length.isdigit() or int(length) > MAX_BODY:
        return refusal(
            413,
            "PAYLOAD_TOO_LARGE",
            f"a request here needs a declared body of at most {MAX_BODY} bytes",
            "Type or paste less at a time.",
        )
    return None
