"""Sign-in for people: a server token, typed once into a form, becomes a cookie.

The token is checked in constant time against every accepted token (``SANDBOX_TOKEN`` and
``SANDBOX_TOKENS``); a match opens a sign-in: a random id, kept only in this server's memory,
sent as an ``HttpOnly``, ``SameSite=Strict`` cookie scoped to ``/ui``. The token itself never
goes into a URL, a cookie or a log line. Each sign-in is the client its token is over MCP, so
a person sees exactly the sessions their token's agents created. Sign-ins end on sign-out,
after ``SIGNIN_TTL_S``, and with the server.

A server without any token (loopback only, see ``sandbox.mcp.http``) has one anonymous client:
its form signs in with an empty token.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

COOKIE = "sandbox_ui"
SIGNIN_TTL_S = 12 * 3600
MAX_SIGNINS = 1000  # the oldest is forgotten past this


@dataclass(frozen=True)
class SignIn:
    client: str  # the MCP client id of the token (``sandbox.mcp.server.client_of``)
    expires: float


class SignIns:
    """The open sign-ins of this server."""

    def __init__(
        self, tokens: Sequence[str], client_of_token: Callable[[str], str], *, anonymous: str
    ) -> None:
        self._tokens = [t.encode() for t in tokens]
        self._client_of_token = client_of_token
        self._anonymous = anonymous
        self._open: dict[str, SignIn] = {}
        self._lock = threading.Lock()

    @property
    def needs_token(self) -> bool:
        return bool(self._tokens)

    def sign_in(self, token: str) -> str | None:
        """A new sign-in's cookie value for a right token, else None."""
        given = token.strip().encode()
        if self._tokens:
            # compare against every token (no early exit: the time says nothing about which)
            matches = [hmac.compare_digest(given, t) for t in self._tokens]
            if not (given and any(matches)):
                return None
            client = self._client_of_token(given.decode())
        else:
            client = self._anonymous
        cookie = secrets.token_urlsafe(32)
        with self._lock:
            if len(self._open) >= MAX_SIGNINS:
                del self._open[next(iter(self._open))]
            self._open[cookie] = SignIn(client, time.monotonic() + SIGNIN_TTL_S)
        return cookie

    def client(self, cookie: str | None) -> str | None:
        """The client of a cookie's sign-in, or None (no cookie, signed out, or expired)."""
        if not cookie:
            return None
        with self._lock:
            found = self._open.get(cookie)
            if found is not None and found.expires < time.monotonic():
                del self._open[cookie]
                found = None
        return found.client if found else None

    def sign_out(self, cookie: str | None) -> None:
        if cookie:
            with self._lock:
                self._open.pop(cookie, None)
