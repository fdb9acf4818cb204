"""How a client without the token learns to send it: ``sandbox serve`` has no OAuth.

``sandbox serve`` authenticates with static bearer tokens. An MCP client that gets a 401 follows
the MCP authorization spec: it reads ``WWW-Authenticate``, fetches the protected-resource metadata
(RFC 9728), looks for an authorization server's metadata (RFC 8414) and tries dynamic client
registration (RFC 7591) at ``/register``. A client that stops at the 401 shows the body instead
(the TypeScript SDK its text, the Python SDK a JSON-RPC error in it). Every one of those steps
answers here with the same way forward, :data:`TOKEN_HINT`, so the user reads "set the
Authorization header" wherever their client stops, instead of "registration rejected (HTTP 404)".
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Scope

from sandbox.errors import ErrorCode

TOKEN_HINT = (
    "This server takes a static bearer token, not OAuth: set the Authorization header to "
    "'Bearer <token>' with the server's SANDBOX_TOKEN in your MCP client's configuration, e.g. "
    '`claude mcp add --transport http sandbox URL --header "Authorization: Bearer $TOKEN"`.'
)


def bearer_token(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header value ("" for any other)."""
    scheme, _, given = (authorization or "").partition(" ")
    return given.strip() if scheme.lower() == "bearer" else ""


RESOURCE_METADATA_PATH = "/.well-known/oauth-protected-resource"
# JSON-RPC leaves -32000..-32099 to the implementation: a refusal before any method ran.
REFUSED_RPC_CODE = -32001


def base_url(scope: Scope) -> str:
    """``scheme://host`` of a request as the client addressed it (its Host was checked)."""
    headers = dict(scope.get("headers") or [])
    host = headers.get(b"host", b"localhost").decode("latin-1")
    return f"{scope.get('scheme', 'http')}://{host}"


def challenge(scope: Scope, mcp_path: str, *, presented: bool) -> str:
    """The ``WWW-Authenticate`` value of a 401 (RFC 6750 and RFC 9728).

    A request without credentials gets no error code (RFC 6750 section 3.1); a wrong token gets
    ``invalid_token``. ``resource_metadata`` points at the document :func:`routes` serve."""
    params = ['Bearer realm="sandbox"']
    if presented:
        params.append('error="invalid_token"')
    params.append(f'error_description="{TOKEN_HINT.replace(chr(34), chr(39))}"')
    params.append(f'resource_metadata="{base_url(scope)}{RESOURCE_METADATA_PATH}{mcp_path}"')
    return ", ".join(params)


def wants_jsonrpc(scope: Scope) -> bool:
    """An MCP streamable-HTTP client: it must accept ``text/event-stream`` on every POST."""
    headers = dict(scope.get("headers") or [])
    return b"text/event-stream" in headers.get(b"accept", b"").lower()


def refusal_body(code: ErrorCode | str, message: str, hint: str, *, jsonrpc: bool) -> Any:
    """The contract's ``{"error": {code, message, hint}}``, or for an MCP client the same
    inside a JSON-RPC error (which the SDKs surface as the call's error)."""
    error = {"code": code, "message": message, "hint": hint}
    if not jsonrpc:
        return {"error": error}
    text = f"{code}: {message}. {hint}"
    return {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": REFUSED_RPC_CODE, "message": text, "data": {"error": error}},
    }


def routes(mcp_path: str) -> list[Route]:
    """The OAuth discovery paths an MCP client tries after a 401, each answering
    :data:`TOKEN_HINT` (served only when a token is configured)."""

    async def resource_metadata(request: Request) -> Response:
        base = base_url(request.scope)
        return JSONResponse(
            {
                "resource": f"{base}{mcp_path}",
                "bearer_methods_supported": ["header"],
                "resource_name": "sandbox MCP server (static bearer token)",
                "sandbox_token_hint": TOKEN_HINT,
            }
        )

    async def no_authorization_server(request: Request) -> Response:
        return JSONResponse({"error": "not_found", "error_description": TOKEN_HINT}, 404)

    async def no_registration(request: Request) -> Response:
        return JSONResponse(
            {"error": "invalid_client_metadata", "error_description": TOKEN_HINT}, 400
        )

    async def no_token_endpoint(request: Request) -> Response:
        return JSONResponse(
            {"error": "unsupported_grant_type", "error_description": TOKEN_HINT}, 400
        )

    async def no_authorization(request: Request) -> Response:
        return PlainTextResponse(TOKEN_HINT + "\n", 400)

    server_metadata = (
        "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration",
    )
    found = [
        Route(path, resource_metadata, methods=["GET"])
        for path in (RESOURCE_METADATA_PATH, RESOURCE_METADATA_PATH + mcp_path)
    ]
    missing = [
        Route(path, no_authorization_server, methods=["GET"])
        for base in server_metadata
        for path in (base, base + mcp_path)
    ]
    return [
        *found,
        *missing,
        Route("/register", no_registration, methods=["POST"]),
        Route("/token", no_token_endpoint, methods=["POST"]),
        Route("/authorize", no_authorization, methods=["GET"]),
    ]
