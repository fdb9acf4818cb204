"""The web view's routes under ``/ui``: sign-in, the session list, a live terminal per
session, replay, take over and signals. ``sandbox.mcp.http`` mounts ``WebApp`` on the same port
as ``/mcp`` when ``SANDBOX_WEB`` (``sandbox serve --web``) is on.

Pages are static files (``static/``: HTML, one script, one stylesheet and the bundled
libraries in ``static/vendor``, see ``web/package.json``); everything live comes from the JSON
and server-sent-event endpoints under ``/ui/api``, which answer only a signed-in person
(``sandbox.web.signin``) and only about their token's sessions (another's is not found).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

from sandbox.errors import SandboxError
from sandbox.web import actions, security
from sandbox.web.feed import SessionFeed
from sandbox.web.signin import COOKIE, SignIns
from sandbox.web.terminal import follow, replay_cast, start_offset

if TYPE_CHECKING:
    from sandbox.session.session import Session

log = logging.getLogger(__name__)

PREFIX = "/ui"
STATIC = Path(__file__).with_name("static")
STREAM_THREADS = 64  # terminals followed at once (each waits in a worker thread)


@dataclass
class WebContext:
    feed: SessionFeed
    signins: SignIns
    host_ok: security.Matcher
    origin_ok: security.Matcher


class WebApp:
    """ASGI app for ``/ui``: Host/Origin checks and locked-down headers on every response."""

    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx
        self.app = Starlette(routes=Handlers(ctx).routes())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = security.check(Request(scope), self.ctx.host_ok, self.ctx.origin_ok)
        if refusal is not None:
            await refusal(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                for name, value in security.HEADERS.items():
                    if name.lower().encode() not in names:
                        headers.append((name.lower().encode(), value.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_secured)


def _page(name: str) -> Response:
    return FileResponse(STATIC / name, media_type="text/html")


def _signed_in(request: Request, cookie: str | None, response: Response) -> Response:
    """``response`` with the sign-in cookie: HttpOnly, SameSite=Strict, only for ``/ui``."""
    if cookie is not None:
        response.set_cookie(
            COOKIE,
            cookie,
            path=PREFIX,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
    return response


class Handlers:
    """The endpoints; each answers only a signed-in person, about their own sessions."""

    def __init__(self, ctx: WebContext) -> None:
        self.feed, self.signins = ctx.feed, ctx.signins
        self.limiter = anyio.CapacityLimiter(STREAM_THREADS)

    def routes(self) -> list[Route | Mount]:
        api = f"{PREFIX}/api/sessions"
        return [
            Route(PREFIX, self.index, methods=["GET"]),
            Route(f"{PREFIX}/", self.index, methods=["GET"]),
            Route(f"{PREFIX}/login", self.login_page, methods=["GET"]),
            Route(f"{PREFIX}/login", self.login, methods=["POST"]),
            Route(f"{PREFIX}/logout", self.logout, methods=["POST"]),
            Route(api, self.sessions, methods=["GET"]),
            Route(f"{api}/{{sid}}/stream", self.stream, methods=["GET"]),
            Route(f"{api}/{{sid}}/recording", self.recording, methods=["GET"]),
            Route(f"{api}/{{sid}}/{{act}}", self.act, methods=["POST"]),
            Mount(f"{PREFIX}/static", StaticFiles(directory=STATIC), name="static"),
        ]

    def client(self, request: Request) -> str | None:
        return self.signins.client(request.cookies.get(COOKIE))

    def session(self, request: Request) -> tuple[str, Session] | Response:
        """The signed-in client and the session the path names, or the refusal."""
        who, sid = self.client(request), str(request.path_params["sid"])
        if who is None:
            return _unauthorized()
        session = self.feed.session(who, sid)
        if session is None:
            return security.refusal(
                404,
                "SESSION_NOT_FOUND",
                f"no session {sid[:100]!r} of yours on this server",
                "Pick one from the list.",
            )
        return who, session

    # -- pages and sign-in -----------------------------------------------------------------
    async def index(self, request: Request) -> Response:
        if self.client(request) is not None:
            return _page("app.html")
        if self.signins.needs_token:
            return RedirectResponse(f"{PREFIX}/login", status_code=303)
        # a loopback server without a token: its one (anonymous) person is signed in at once
        return _signed_in(request, self.signins.sign_in(""), _page("app.html"))

    async def login_page(self, request: Request) -> Response:
        return _page("login.html")

    async def login(self, request: Request) -> Response:
        form = await request.form(max_files=0, max_fields=4)
        token = form.get("token")
        cookie = self.signins.sign_in(token if isinstance(token, str) else "")
        if cookie is None:
            log.warning("web view: a sign-in with a wrong token was refused")
            return RedirectResponse(f"{PREFIX}/login?failed=1", status_code=303)
        log.info("web view: %s signed in", self.signins.client(cookie))
        return _signed_in(request, cookie, RedirectResponse(f"{PREFIX}/", status_code=303))

    async def logout(self, request: Request) -> Response:
        self.signins.sign_out(request.cookies.get(COOKIE))
        response = RedirectResponse(f"{PREFIX}/login", status_code=303)
        response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")
        return response

    # -- the API ---------------------------------------------------------------------------
    async def sessions(self, request: Request) -> Response:
        who = self.client(request)
        if who is None:
            return _unauthorized()
        rows = await anyio.to_thread.run_sync(self.feed.rows, who)
        return JSONResponse({"sessions": rows})

    async def stream(self, request: Request) -> Response:
        found = self.session(request)
        if isinstance(found, Response):
            return found
        session = found[1]
        query = request.query_params
        try:
            align = query.get("align") == "1"
            offset = start_offset(session, int(query.get("from", "-65536")), align=align)
            # a window ends where a line does, so the next one starts cleanly there
            stop = start_offset(session, int(query["to"]), align=True) if "to" in query else None
        except ValueError:
            return security.refusal(
                400,
                "INVALID_ARGUMENT",
                "from and to must be byte offsets",
                "e.g. from=-65536 (the tail, then live) or from=0&to=65536 (a window)",
            )
        return StreamingResponse(
            follow(session, offset, self.limiter, stop),
            media_type="text/event-stream",
            headers={"X-Accel-Buffering": "no"},
        )

    async def recording(self, request: Request) -> Response:
        found = self.session(request)
        if isinstance(found, Response):
            return found
        cast = await anyio.to_thread.run_sync(replay_cast, found[1])
        if cast is None:
            return security.refusal(
                404,
                "NOT_RECORDED",
                f"session {found[1].id} has no recording",
                "The server records sessions unless SANDBOX_RECORD=0.",
            )
        return Response(cast, media_type="application/x-asciicast")

    async def act(self, request: Request) -> Response:
        """POST takeover / input / resize / signal (``sandbox.web.actions``)."""
        found = self.session(request)
        if isinstance(found, Response):
            return found
        who, session = found
        name = str(request.path_params["act"])
        action = actions.ACTIONS.get(name)
        if action is None:
            return security.refusal(404, "NOT_FOUND", f"no action {name[:50]!r}", "")
        if name in actions.NEEDS_HOLD and session.takeover.holder != who:
            return actions.not_held()
        try:
            body = json.loads(await request.body() or b"{}")
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            return JSONResponse(await action(session, who, body))
        except ValueError as exc:
            return security.refusal(400, "INVALID_ARGUMENT", str(exc)[:200], "Send a JSON object.")
        except SandboxError as exc:
            return security.refusal(409, exc.code, exc.message, exc.hint or "")


def _unauthorized() -> Response:
    return security.refusal(
        401, "UNAUTHORIZED", "not signed in", f"Sign in at {PREFIX}/login with the token."
    )
