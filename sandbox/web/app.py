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
from typing import Any

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
from sandbox.web import security
from sandbox.web.feed import SessionFeed
from sandbox.web.signin import COOKIE, SignIns
from sandbox.web.terminal import follow, replay_cast, start_offset

log = logging.getLogger(__name__)

PREFIX = "/ui"
STATIC = Path(__file__).with_name("static")
SIGNALS = ("INT", "TERM", "KILL")
MAX_INPUT_CHARS = 64 * 1024
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
        self.app = Starlette(routes=routes(ctx))

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


def routes(ctx: WebContext) -> list[Route | Mount]:
    feed, signins = ctx.feed, ctx.signins
    limiter = anyio.CapacityLimiter(STREAM_THREADS)

    def client(request: Request) -> str | None:
        return signins.client(request.cookies.get(COOKIE))

    def unauthorized() -> Response:
        return security.refusal(
            401, "UNAUTHORIZED", "not signed in", f"Sign in at {PREFIX}/login with the token."
        )

    def not_found(session_id: str) -> Response:
        return security.refusal(
            404,
            "SESSION_NOT_FOUND",
            f"no session {session_id[:100]!r} of yours on this server",
            "Pick one from the list.",
        )

    async def index(request: Request) -> Response:
        if client(request) is not None:
            return _page("app.html")
        if signins.needs_token:
            return RedirectResponse(f"{PREFIX}/login", status_code=303)
        return _signed_in(request, signins.sign_in(""), _page("app.html"))  # loopback, no token

    async def login_page(request: Request) -> Response:
        return _page("login.html")

    async def login(request: Request) -> Response:
        form = await request.form(max_files=0, max_fields=4)
        token = form.get("token")
        cookie = signins.sign_in(token if isinstance(token, str) else "")
        if cookie is None:
            log.warning("web view: a sign-in with a wrong token was refused")
            return RedirectResponse(f"{PREFIX}/login?failed=1", status_code=303)
        log.info("web view: %s signed in", signins.client(cookie))
        return _signed_in(request, cookie, RedirectResponse(f"{PREFIX}/", status_code=303))

    async def logout(request: Request) -> Response:
        signins.sign_out(request.cookies.get(COOKIE))
        response = RedirectResponse(f"{PREFIX}/login", status_code=303)
        response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")
        return response

    async def sessions(request: Request) -> Response:
        who = client(request)
        if who is None:
            return unauthorized()
        rows = await anyio.to_thread.run_sync(feed.rows, who)
        return JSONResponse({"sessions": rows})

    async def stream(request: Request) -> Response:
        who, sid = client(request), request.path_params["sid"]
        if who is None:
            return unauthorized()
        session = feed.session(who, sid)
        if session is None:
            return not_found(sid)
        query = request.query_params
        try:
            offset = start_offset(
                session, int(query.get("from", "-65536")), align=query.get("align") == "1"
            )
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
            follow(session, offset, limiter, stop),
            media_type="text/event-stream",
            headers={"X-Accel-Buffering": "no"},
        )

    async def recording(request: Request) -> Response:
        who, sid = client(request), request.path_params["sid"]
        session = feed.session(who, sid) if who is not None else None
        if who is None:
            return unauthorized()
        if session is None:
            return not_found(sid)
        cast = await anyio.to_thread.run_sync(replay_cast, session)
        if cast is None:
            return security.refusal(
                404,
                "NOT_RECORDED",
                f"session {sid} has no recording",
                "The server records sessions unless SANDBOX_RECORD=0.",
            )
        return Response(cast, media_type="application/x-asciicast")

    async def act(request: Request) -> Response:
        """POST takeover / input / resize / signal on one session."""
        who, sid, action = client(request), request.path_params["sid"], request.path_params["act"]
        if who is None:
            return unauthorized()
        session = feed.session(who, sid)
        if session is None:
            return not_found(sid)
        try:
            body = json.loads(await request.body() or b"{}")
            if not isinstance(body, dict):
                raise ValueError("not an object")
            return await _act(session, who, action, body)
        except ValueError as exc:
            return security.refusal(400, "INVALID_ARGUMENT", str(exc)[:200], "Send a JSON object.")
        except SandboxError as exc:
            return security.refusal(409, exc.code, exc.message, exc.hint or "")

    return [
        Route(PREFIX, index, methods=["GET"]),
        Route(f"{PREFIX}/", index, methods=["GET"]),
        Route(f"{PREFIX}/login", login_page, methods=["GET"]),
        Route(f"{PREFIX}/login", login, methods=["POST"]),
        Route(f"{PREFIX}/logout", logout, methods=["POST"]),
        Route(f"{PREFIX}/api/sessions", sessions, methods=["GET"]),
        Route(f"{PREFIX}/api/sessions/{{sid}}/stream", stream, methods=["GET"]),
        Route(f"{PREFIX}/api/sessions/{{sid}}/recording", recording, methods=["GET"]),
        Route(f"{PREFIX}/api/sessions/{{sid}}/{{act}}", act, methods=["POST"]),
        Mount(f"{PREFIX}/static", StaticFiles(directory=STATIC), name="static"),
    ]


async def _act(session: Any, who: str, action: str, body: dict[str, Any]) -> Response:
    takeover = session.takeover
    if action == "takeover":
        if body.get("hold") is True:
            takeover.take(who)
            log.info("web view: %s took over session %s", who, session.id)
        else:
            takeover.release()
            log.info("web view: %s released session %s", who, session.id)
        return JSONResponse({"held": takeover.holder is not None})
    if action in ("input", "resize") and takeover.holder != who:
        return security.refusal(
            409,
            "NOT_HELD",
            "take over the session before typing into it or resizing it",
            "Press Take over: the agent then waits until you release it.",
        )
    if action == "resize":
        rows, cols = body.get("rows"), body.get("cols")
        if not (isinstance(rows, int) and isinstance(cols, int)):
            raise ValueError("rows and cols must be integers")
        resized = await anyio.to_thread.run_sync(session.resize, rows, cols)
        return JSONResponse(resized.model_dump(mode="json"))
    if action == "input":
        data = body.get("data")
        if not isinstance(data, str) or not data or len(data) > MAX_INPUT_CHARS:
            raise ValueError(f"data must be 1..{MAX_INPUT_CHARS} characters of text")
        await anyio.to_thread.run_sync(session.write_raw, data.encode("utf-8"))
        takeover.typed(data)
        return JSONResponse({"bytes_sent": len(data.encode("utf-8"))})
    if action == "signal":
        sig = body.get("signal")
        if sig not in SIGNALS:
            raise ValueError(f"signal must be one of {', '.join(SIGNALS)}")
        log.info("web view: %s sent %s to session %s", who, sig, session.id)
        result = await anyio.to_thread.run_sync(session.signal, sig)
        return JSONResponse(result.model_dump(mode="json"))
    return security.refusal(404, "NOT_FOUND", f"no action {action[:50]!r}", "")
