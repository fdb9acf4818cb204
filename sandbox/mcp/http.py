"""``sandbox serve``: the MCP server over streamable HTTP at ``/mcp``, plus ``GET /healthz``.

Every ``/mcp`` request passes ``Guard`` first, whatever address the server is bound to:

* the ``Host`` header must be an allowed host (421 otherwise) and an ``Origin`` header, when
  present, an allowed origin (403) — DNS-rebinding protection. Allowed hosts come from
  ``SANDBOX_ALLOWED_HOSTS`` (comma-separated; ``name``, ``name:port`` or ``name:*``), by default
  ``localhost``, ``127.0.0.1`` and ``[::1]`` with the server's port;
* with a token configured, ``Authorization: Bearer <token>`` must match it, or one of
  ``SANDBOX_TOKENS`` (401 otherwise, compared in constant time);
* a request body larger than ``SANDBOX_HTTP_MAX_BODY_BYTES`` is refused with 413 and a JSON body
  that says so, whether it declares its length or streams it in chunks (checked after the token,
  so an anonymous client cannot make the server read anything).

Beyond the guard: uvicorn refuses connections past ``SANDBOX_HTTP_MAX_CONNECTIONS`` (503), the
SDK refuses MCP connections past ``SANDBOX_HTTP_MAX_CLIENTS`` (503) and closes those idle for
``SANDBOX_HTTP_CLIENT_IDLE_S``; per-token session quotas are enforced by the tools
(``sandbox.mcp.server``).

Binding a non-loopback address without a token is refused before anything starts.
``/healthz`` needs nothing and says only that the server is alive.
"""

from __future__ import annotations

import errno
import hmac
import ipaddress
import json
import logging
import signal
import socket
from collections import deque
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sandbox.config import SandboxConfig
from sandbox.errors import InvalidArgumentError
from sandbox.mcp import http_auth

if TYPE_CHECKING:
    from mcp.server import MCPServer

    from sandbox.mcp.tools import Tools

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
HEALTH_PATH = "/healthz"
ALLOWED_HOSTS_ENV = "SANDBOX_ALLOWED_HOSTS"
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
GRACEFUL_SHUTDOWN_S = 3


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def allowed_hosts(host: str, port: int, configured: Sequence[str] = ()) -> list[str]:
    """Host header values accepted on ``/mcp`` (``name:*`` allows any port).

    ``configured`` is ``SandboxConfig.allowed_hosts`` (``SANDBOX_ALLOWED_HOSTS``); without it,
    the loopback names and the bound address."""
    if configured:
        hosts: list[str] = []
        for item in configured:
            bare = item.endswith("]") if item.startswith("[") else ":" not in item
            if bare:  # no port given: with ours, and without
                hosts += [_host_port(item, port), item]
            else:
                hosts.append(item)
        return hosts
    hosts = [_host_port(h, port) for h in LOOPBACK_HOSTS]
    if host not in ("0.0.0.0", "::", "") and _host_port(host, port) not in hosts:
        hosts.append(_host_port(host, port))
    return hosts


def allowed_origins(hosts: list[str]) -> list[str]:
    return [f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")]


def _matches(value: str, allowed: list[str]) -> bool:
    value = value.lower()
    for pattern in allowed:
        pattern = pattern.lower()
        if value == pattern or (pattern.endswith(":*") and value.startswith(pattern[:-1])):
            return True
    return False


def _refusal(
    status: int, code: str, message: str, hint: str, scope: Scope | None = None
) -> Response:
    """A refusal in the contract's shape (JSON-RPC-wrapped for an MCP client, see
    ``sandbox.mcp.http_auth``); a 401 says how to send the token."""
    jsonrpc = scope is not None and http_auth.wants_jsonrpc(scope)
    body = http_auth.refusal_body(code, message, hint, jsonrpc=jsonrpc)
    return JSONResponse(body, status_code=status)


def _unauthorized(scope: Scope, *, presented: bool) -> Response:
    response = _refusal(
        401,
        "UNAUTHORIZED",
        "wrong bearer token" if presented else "missing bearer token",
        http_auth.TOKEN_HINT,
        scope,
    )
    response.headers["WWW-Authenticate"] = http_auth.challenge(scope, MCP_PATH, presented=presented)
    return response


def _too_large(limit: int, scope: Scope | None = None) -> Response:
    return _refusal(
        413,
        "PAYLOAD_TOO_LARGE",
        f"the request body is larger than this server's limit of {limit} bytes",
        "Send less per request (e.g. write big files into the project instead of passing them "
        "in a command), or have the operator raise SANDBOX_HTTP_MAX_BODY_BYTES.",
        scope,
    )


class Guard:
    """ASGI middleware: Host/Origin checks, the bearer token and the body size on ``/mcp``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        hosts: list[str],
        origins: list[str],
        tokens: Sequence[str] = (),
        max_body: int | None = None,
    ) -> None:
        self.app = app
        self._tokens = [t.encode() for t in dict.fromkeys((token, *tokens)) if t]
        self.hosts = hosts
        self.origins = origins
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        guarded = path == MCP_PATH or path.startswith(MCP_PATH + "/")
        if scope["type"] != "http" or not guarded:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self.check(headers, scope)
        if refusal is None and self.max_body is not None:
            refusal, receive = await self._limit_body(scope, headers, receive)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _limit_body(
        self, scope: Scope, headers: Headers, receive: Receive
    ) -> tuple[Response | None, Receive]:
        """413 for a body above ``max_body``: by its declared length, else by reading it (it is
        then replayed to the app)."""
        limit = self.max_body
        assert limit is not None
        declared = headers.get("content-length")
        if declared is not None and declared.strip().isdigit():
            if int(declared) > limit:
                log.warning("refused a %s byte request body", declared.strip())
                return _too_large(limit, scope), receive
            return None, receive
        if scope.get("method", "GET") not in ("POST", "PUT", "PATCH"):
            return None, receive
        buffered: deque[Message] = deque()
        size = 0
        while True:
            message = await receive()
            buffered.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > limit:
                log.warning("refused a streamed request body above %d bytes", limit)
                return _too_large(limit, scope), receive
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return buffered.popleft() if buffered else await receive()

        return None, replay

    def check(self, headers: Headers, scope: Scope) -> Response | None:
        host = headers.get("host", "")
        if not _matches(host, self.hosts):
            log.warning("refused a request with Host %r", host[:100])
            return _refusal(
                421,
                "BAD_HOST",
                f"Host {host[:100]!r} is not allowed",
                f"Connect through an allowed host name, or add it to {ALLOWED_HOSTS_ENV}.",
                scope,
            )
        origin = headers.get("origin")
        if origin is not None and not _matches(origin, self.origins):
            log.warning("refused a request with Origin %r", origin[:100])
            return _refusal(
                403,
                "BAD_ORIGIN",
                f"Origin {origin[:100]!r} is not allowed",
                f"Browsers may only call this server from an origin of {ALLOWED_HOSTS_ENV}.",
                scope,
            )
        if self._tokens:
            authorization = headers.get("authorization", "")
            presented = http_auth.bearer_token(authorization).encode()
            # compare against every token (no early exit: the time says nothing about which)
            matches = [hmac.compare_digest(presented, t) for t in self._tokens]
            if not (presented and any(matches)):
                said = bool(authorization.partition(" ")[2].strip())  # a token, of any scheme
                return _unauthorized(scope, presented=said)
        return None


async def healthz(request: Request) -> Response:
    return Response(json.dumps({"status": "ok"}), media_type="application/json")


def build_app(
    server: MCPServer[Any],
    config: SandboxConfig,
    host: str,
    port: int,
    tools: Tools | None = None,
) -> ASGIApp:
    """The ASGI app: the SDK's streamable HTTP app (with ``/healthz``) behind ``Guard``; with
    ``tools`` and ``config.web``, the web view at ``/ui`` too (``sandbox.mcp.http_web``)."""
    hosts = allowed_hosts(host, port, config.allowed_hosts)
    origins = allowed_origins(hosts)
    server.custom_route(HEALTH_PATH, methods=["GET"], include_in_schema=False)(healthz)
    if config.all_tokens:  # what a client that got a 401 looks for next
        for route in http_auth.routes(MCP_PATH):
            server.custom_route(
                route.path, methods=sorted(route.methods or ()), include_in_schema=False
            )(route.endpoint)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )
    # json_response stays False: a JSON-only response would drop progress notifications.
    inner: ASGIApp = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        transport_security=security,
        host=host,
        max_request_body_size=config.http_max_body_bytes,
        max_sessions=config.http_max_clients,
        session_idle_timeout=config.http_client_idle_s,
    )
    if tools is not None and config.web:
        from sandbox.mcp.http_web import with_web

        inner = with_web(
            inner, tools, config, lambda h: _matches(h, hosts), lambda o: _matches(o, origins)
        )
    return Guard(
        inner,
        token=config.token,
        tokens=config.tokens,
        hosts=hosts,
        origins=origins,
        max_body=config.http_max_body_bytes,
    )


def check_bind(config: SandboxConfig, host: str) -> None:
    if not is_loopback(host) and not config.all_tokens:
        raise InvalidArgumentError(
            f"refusing to serve on {host} without a token: anyone who can reach it could run "
            "commands",
            hint="Set SANDBOX_TOKEN (e.g. SANDBOX_TOKEN=$(openssl rand -hex 32)) or pass "
            "--token, or bind 127.0.0.1.",
        )


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything starts: a busy port is one clear error."""
    bare = host.strip("[]")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            bare or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise InvalidArgumentError(
            f"cannot serve on {host!r}: {exc.strerror}",
            hint="Pass --host an address of this machine, e.g. 127.0.0.1 or 0.0.0.0.",
        ) from exc
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(socket.SOMAXCONN)
    except OSError as exc:
        sock.close()
        where = _host_port(host, port)
        if exc.errno == errno.EADDRINUSE:
            raise InvalidArgumentError(
                f"port {port} is already in use on {bare or 'all addresses'} ({where})",
                hint=f"Stop what listens there (`ss -ltnp 'sport = :{port}'` names it), or "
                "choose another port with --port.",
            ) from exc
        raise InvalidArgumentError(
            f"cannot listen on {where}: {exc.strerror}",
            hint="Choose another --host or --port (ports below 1024 need privileges).",
        ) from exc
    sock.set_inheritable(True)
    return sock


def serve(config: SandboxConfig, host: str, port: int) -> None:
    """Run until SIGINT/SIGTERM; then destroy this server's sessions."""
    import uvicorn

    from sandbox.backends import connect
    from sandbox.mcp.server import build_server, collect_orphans
    from sandbox.mcp.tools import Tools
    from sandbox.session.manager import SessionManager

    check_bind(config, host)
    listener = bind(host, port)
    manager = SessionManager(config, connect(lazy=True))  # answers without an engine
    stopping: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)

    # uvicorn handles SIGINT/SIGTERM while it runs, then re-raises them: let them land here.
    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        collect_orphans(manager)
        tools = Tools(config, manager)
        app = build_app(build_server(config, tools=tools), config, host, port, tools)
        uv_config = uvicorn.Config(
            app,
            host=host.strip("[]"),
            port=port,
            log_config=None,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
            limit_concurrency=config.http_max_connections,
        )
        log.info(
            "serving MCP on http://%s%s (token %s)%s",
            _host_port(host, port),
            MCP_PATH,
            "required" if config.all_tokens else "not required",
            f", the web view on http://{_host_port(host, port)}/ui" if config.web else "",
        )
        uvicorn.Server(uv_config).run(sockets=[listener])
    finally:
        manager.close()
        listener.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        log.info("HTTP server stopped")
