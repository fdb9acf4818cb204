"""The HTTP guard: allowed hosts, Host/Origin checks, the bearer token, the bind rule."""

from __future__ import annotations

import socket

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from sandbox.config import SandboxConfig
from sandbox.errors import InvalidArgumentError
from sandbox.mcp import http_auth
from sandbox.mcp.http import (
    Guard,
    allowed_hosts,
    allowed_origins,
    bind,
    check_bind,
    is_loopback,
)


async def hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


def guarded(token: str | None, port: int = 8765) -> TestClient:
    inner = Starlette(routes=[Route("/mcp", hello, methods=["POST"]), Route("/healthz", hello)])
    hosts = allowed_hosts("0.0.0.0", port)
    app = Guard(inner, token=token, hosts=hosts, origins=allowed_origins(hosts))
    return TestClient(app, base_url=f"http://127.0.0.1:{port}")


def test_default_hosts_are_loopback_names_with_the_port() -> None:
    assert allowed_hosts("0.0.0.0", 9000) == [
        "localhost:9000",
        "127.0.0.1:9000",
        "[::1]:9000",
    ]
    assert "10.0.0.5:9000" in allowed_hosts("10.0.0.5", 9000)


def test_allowed_hosts_from_the_environment() -> None:
    config = SandboxConfig.from_env(
        {"SANDBOX_ALLOWED_HOSTS": "box.lan, api.example.com:443 ,proxy:*,[fd00::1]"}
    )
    assert allowed_hosts("0.0.0.0", 8765, config.allowed_hosts) == [
        "box.lan:8765",
        "box.lan",
        "api.example.com:443",
        "proxy:*",
        "[fd00::1]:8765",
        "[fd00::1]",
    ]


def test_guard_checks_host_origin_and_token_on_mcp_only() -> None:
    client = guarded("s3cret")
    auth = {"Authorization": "Bearer s3cret"}
    assert client.post("/mcp", headers=auth).status_code == 200
    assert client.post("/mcp").status_code == 401
    assert client.post("/mcp", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.post("/mcp", headers={"Authorization": "Basic s3cret"}).status_code == 401
    assert client.post("/mcp", headers={**auth, "Host": "evil.example"}).status_code == 421
    bad_origin = {**auth, "Origin": "http://evil.example"}
    assert client.post("/mcp", headers=bad_origin).status_code == 403
    good_origin = {**auth, "Origin": "http://localhost:8765"}
    assert client.post("/mcp", headers=good_origin).status_code == 200
    assert client.get("/healthz", headers={"Host": "anything"}).status_code == 200
    body = client.post("/mcp").json()
    assert body["error"]["code"] == "UNAUTHORIZED"
    assert "Bearer" in body["error"]["hint"]


def test_guard_without_token_still_checks_host() -> None:
    client = guarded(None)
    assert client.post("/mcp").status_code == 200
    assert client.post("/mcp", headers={"Host": "evil.example:8765"}).status_code == 421


def test_non_loopback_bind_needs_a_token() -> None:
    assert is_loopback("127.0.0.1")
    assert is_loopback("localhost")
    assert is_loopback("::1")
    assert not is_loopback("0.0.0.0")
    assert not is_loopback("example.com")
    with pytest.raises(InvalidArgumentError, match="token") as info:
        check_bind(SandboxConfig(), "0.0.0.0")
    assert "SANDBOX_TOKEN" in info.value.hint
    check_bind(SandboxConfig(), "127.0.0.1")
    check_bind(SandboxConfig(token="t"), "0.0.0.0")


# -- a client without the token is told to set the Authorization header -------------------------

MCP_ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def test_401_challenge_names_the_header_and_the_resource_metadata() -> None:
    client = guarded("s3cret")
    missing = client.post("/mcp")
    challenge = missing.headers["www-authenticate"]
    assert challenge.startswith('Bearer realm="sandbox"')
    assert "error=" not in challenge  # no credentials: no error code (RFC 6750 3.1)
    assert "set the Authorization header" in challenge
    assert 'resource_metadata="http://127.0.0.1:8765/.well-known/oauth-protected-resource/mcp"' in (
        challenge
    )
    wrong = client.post("/mcp", headers={"Authorization": "Bearer nope"})
    assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
    assert wrong.json()["error"]["message"] == "wrong bearer token"


def test_401_to_an_mcp_client_is_a_jsonrpc_error_carrying_the_contract_error() -> None:
    body = guarded("s3cret").post("/mcp", headers=MCP_ACCEPT, content=b"{}").json()
    assert body["jsonrpc"] == "2.0"
    assert body["id"] is None
    assert isinstance(body["error"]["code"], int)
    assert "set the Authorization header" in body["error"]["message"]
    assert body["error"]["data"]["error"]["code"] == "UNAUTHORIZED"


def test_oauth_discovery_paths_each_answer_set_the_authorization_header() -> None:
    client = TestClient(Starlette(routes=http_auth.routes("/mcp")), base_url="http://box:1")
    metadata = client.get("/.well-known/oauth-protected-resource/mcp").json()
    assert metadata["resource"] == "http://box:1/mcp"
    assert metadata["bearer_methods_supported"] == ["header"]
    assert "authorization_servers" not in metadata
    for path in (
        "/.well-known/oauth-authorization-server",
        "/.well-known/oauth-authorization-server/mcp",
        "/.well-known/openid-configuration",
    ):
        answer = client.get(path)
        assert answer.status_code == 404
        assert answer.json()["error_description"] == http_auth.TOKEN_HINT
    registration = client.post("/register", json={"redirect_uris": ["http://localhost/cb"]})
    assert registration.status_code == 400
    assert registration.json()["error_description"] == http_auth.TOKEN_HINT
    assert client.post("/token").status_code == 400
    assert "Authorization header" in client.get("/authorize").text


def test_a_busy_port_is_one_error_naming_it_and_what_to_do() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(InvalidArgumentError) as caught:
            bind("127.0.0.1", port)
    assert f"port {port} is already in use" in caught.value.message
    assert "--port" in caught.value.hint
    with bind("127.0.0.1", 0) as free:
        assert free.getsockname()[1] > 0
