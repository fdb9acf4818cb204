"""The web view (``sandbox.web``) on the HTTP server's port: ``/ui`` goes to it, the rest to MCP.

The web view sees what the MCP tools see: a person signed in with a token is that token's
client (``client_of``) and sees the sessions ``ClientLedger.visible`` admits; Host and Origin are
checked against the same allowed hosts as ``/mcp``.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from sandbox.config import SandboxConfig
from sandbox.mcp.clients import ANONYMOUS_CLIENT, client_of
from sandbox.mcp.tools import Tools
from sandbox.web.app import PREFIX, WebApp, WebContext
from sandbox.web.feed import SessionFeed
from sandbox.web.signin import SignIns


class WithWeb:
    """ASGI: ``/ui`` and below to the web view, everything else (and the lifespan) to ``app``."""

    def __init__(self, app: ASGIApp, web: ASGIApp) -> None:
        self.app = app
        self.web = web

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] == "http" and (path == PREFIX or path.startswith(PREFIX + "/")):
            await self.web(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def with_web(
    app: ASGIApp,
    tools: Tools,
    config: SandboxConfig,
    host_ok: Callable[[str], bool],
    origin_ok: Callable[[str], bool],
) -> ASGIApp:
    tokens = config.all_tokens

    def client_of_token(token: str) -> str:
        return client_of({"authorization": f"Bearer {token}"}, tokens)

    ctx = WebContext(
        feed=SessionFeed(tools.manager, tools.clients.visible),
        signins=SignIns(tokens, client_of_token, anonymous=ANONYMOUS_CLIENT),
        host_ok=host_ok,
        origin_ok=origin_ok,
    )
    return WithWeb(app, WebApp(ctx))
