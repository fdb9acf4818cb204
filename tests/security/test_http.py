"""HTTP abuse against a real ``sandbox serve``: no or forged token, DNS rebinding, oversized
bodies (declared and streamed), floods of requests and of sessions, and one token reaching for
another's sessions. Every loop is bounded and talks to 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import docker
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from sandbox.config import LABEL_OWNER
from tests.conftest import make_project
from tests.security.conftest import SEC_OWNER
from tests.served import (
    MCP_HEADERS,
    Served,
    free_port,
    initialize,
    payload,
    refusal,
    start_server,
)

pytestmark = pytest.mark.docker

OWNER = f"{SEC_OWNER}-http"
TOKEN_A = secrets.token_hex(16)
TOKEN_B = secrets.token_hex(16)
QUOTA = 2
MAX_BODY = 64 * 1024
MAX_CLIENTS = 24
INIT = initialize("abuse")


@pytest.fixture(scope="module")
def served(
    engine: docker.DockerClient, allowed_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_")}
    env.update(
        SANDBOX_OWNER=OWNER,
        SANDBOX_STATE_DIR=str(tmp_path_factory.mktemp("http-abuse")),
        SANDBOX_ALLOWED_ROOTS=str(allowed_root),
        SANDBOX_MEMORY_MB="256",
        SANDBOX_TOKEN=TOKEN_A,
        SANDBOX_TOKENS=TOKEN_B,
        SANDBOX_MAX_SESSIONS_PER_TOKEN=str(QUOTA),
        SANDBOX_HTTP_MAX_BODY_BYTES=str(MAX_BODY),
        SANDBOX_HTTP_MAX_CLIENTS=str(MAX_CLIENTS),
        SANDBOX_RECORD="0",
    )
    served = start_server(env, port=port)
    proc = served.proc
    yield served
    proc.terminate()
    assert proc.wait(timeout=30) == 0
    mine = {"label": f"{LABEL_OWNER}={OWNER}"}
    leftovers = engine.containers.list(all=True, filters=mine)
    for container in leftovers:
        container.remove(force=True)
    assert leftovers == []


def post(served: Served, body: Any = INIT, **headers: str) -> httpx.Response:
    return httpx.post(
        served.base + "/mcp", json=body, headers={**MCP_HEADERS, **headers}, timeout=15
    )


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": "Bearer"}, 401),
        ({"Authorization": f"Bearer {TOKEN_A[:-1]}"}, 401),
        ({"Authorization": f"Bearer {TOKEN_A}x"}, 401),
        ({"Authorization": f"Basic {TOKEN_A}"}, 401),
        ({"Authorization": TOKEN_A}, 401),
        ({"Authorization": f"Bearer {TOKEN_A}", "Host": "evil.example"}, 421),
        ({"Authorization": f"Bearer {TOKEN_A}", "Host": "127.0.0.1.evil.example"}, 421),
        ({"Authorization": f"Bearer {TOKEN_A}", "Origin": "http://evil.example"}, 403),
        ({"Authorization": f"Bearer {TOKEN_A}", "Origin": "null"}, 403),
        ({"Host": "evil.example"}, 421),  # rebinding is refused before the token is looked at
    ],
    ids=lambda v: json.dumps(v)[:60] if isinstance(v, dict) else str(v),
)
def test_requests_without_the_token_or_from_a_foreign_origin_are_refused(
    served: Served, headers: dict[str, str], status: int
) -> None:
    response = post(served, **headers)
    assert response.status_code == status
    assert refusal(response)["code"] in {"UNAUTHORIZED", "BAD_HOST", "BAD_ORIGIN"}


def test_both_tokens_are_accepted(served: Served) -> None:
    assert post(served, **bearer(TOKEN_A)).status_code == 200
    assert post(served, **bearer(TOKEN_B)).status_code == 200


def test_healthz_reveals_nothing(served: Served) -> None:
    response = httpx.get(served.base + "/healthz", timeout=5)
    assert response.json() == {"status": "ok"}
    assert TOKEN_A not in response.text


def test_an_oversized_body_is_413_with_a_clear_body(served: Served) -> None:
    big = {**INIT, "padding": "x" * (MAX_BODY + 1)}
    response = post(served, big, **bearer(TOKEN_A))
    assert response.status_code == 413
    error = refusal(response)
    assert error["code"] == "PAYLOAD_TOO_LARGE"
    assert str(MAX_BODY) in error["message"]
    assert "SANDBOX_HTTP_MAX_BODY_BYTES" in error["hint"]


def test_an_oversized_streamed_body_without_a_length_is_413_too(served: Served) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "padding": "'
        for _ in range(MAX_BODY // 4096 + 2):
            yield b"x" * 4096
        yield b'"}'

    response = httpx.post(
        served.base + "/mcp",
        content=chunks(),
        headers={**MCP_HEADERS, **bearer(TOKEN_A)},
        timeout=15,
    )
    assert response.status_code == 413
    assert refusal(response)["code"] == "PAYLOAD_TOO_LARGE"


def test_an_oversized_body_without_the_token_is_401_and_never_read(served: Served) -> None:
    big = {**INIT, "padding": "x" * (MAX_BODY * 4)}
    assert post(served, big).status_code == 401


def mcp_call(token: str, served: Served, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Run tool calls in one MCP connection; each result's structured content (or error)."""

    async def go() -> list[Any]:
        out: list[Any] = []
        async with (
            httpx2.AsyncClient(headers=bearer(token), timeout=httpx2.Timeout(30, read=120)) as h,
            Client(streamable_http_client(served.base + "/mcp", http_client=h)) as client,
        ):
            with anyio.fail_after(120):
                for tool, arguments in calls:
                    result = await client.call_tool(tool, arguments)
                    out.append(payload(result))
        return out

    return anyio.run(go)


def test_each_token_has_a_session_quota_and_sees_only_its_own_sessions(served: Served) -> None:
    projects = [make_project("quota") for _ in range(QUOTA + 2)]
    created = mcp_call(
        TOKEN_A,
        served,
        [("session_create", {"project_path": str(p)}) for p in projects[: QUOTA + 1]]
        + [("execute", {"project_path": str(projects[QUOTA + 1]), "command": "echo x"})],
    )
    ids = [c["session_id"] for c in created[:QUOTA]]
    assert all(c["error"]["code"] == "SESSION_LIMIT" for c in created[QUOTA:])
    assert "SANDBOX_MAX_SESSIONS_PER_TOKEN" in created[QUOTA]["error"]["hint"]
    theirs = mcp_call(
        TOKEN_B,
        served,
        [
            ("session_list", {}),
            ("session_create", {"project_path": str(projects[0])}),
            ("execute", {"session_id": ids[0], "command": "echo stolen"}),
            ("session_destroy", {"session_id": ids[0], "force": True}),
            ("read_log", {"session_id": ids[0]}),
            ("session_info", {"session_id": ids[0]}),
            ("execute", {"project_path": str(projects[0]), "command": "echo $SANDBOX_SESSION"}),
        ],
    )
    assert theirs[0]["count"] == 0  # B sees none of A's sessions
    b_id = theirs[1]["session_id"]
    for refused in theirs[2:6]:
        assert refused["error"]["code"] == "SESSION_NOT_FOUND"
    assert theirs[6]["output"].strip() == b_id  # by project: B's own session, not A's
    mine = mcp_call(TOKEN_A, served, [("session_list", {})])[0]
    assert sorted(s["session_id"] for s in mine["sessions"]) == sorted(ids)
    cleanup = [("session_destroy", {"session_id": i, "force": True}) for i in ids]
    assert all("destroyed" in r for r in mcp_call(TOKEN_A, served, cleanup))
    mcp_call(TOKEN_B, served, [("session_destroy", {"session_id": b_id, "force": True})])


def test_a_flood_of_requests_and_connections_is_bounded_and_the_server_lives(
    served: Served,
) -> None:
    def one(i: int) -> int:
        headers = bearer(TOKEN_A if i % 2 else TOKEN_B)
        with contextlib.suppress(httpx.HTTPError):
            return post(served, **headers).status_code
        return -1

    with ThreadPoolExecutor(max_workers=16) as pool:
        statuses = list(pool.map(one, range(MAX_CLIENTS * 3)))
    assert set(statuses) <= {200, 503}, statuses
    assert statuses.count(200) <= MAX_CLIENTS  # MCP connections are capped
    assert 503 in statuses
    assert served.proc.poll() is None
    assert httpx.get(served.base + "/healthz", timeout=5).status_code == 200
    garbage = [b"{", b"[]" * 1000, b'{"jsonrpc": "2.0"}', b"\xff\xfe", b"null"]
    for body in garbage:
        response = httpx.post(
            served.base + "/mcp",
            content=body,
            headers={**MCP_HEADERS, **bearer(TOKEN_A)},
            timeout=10,
        )
        assert response.status_code < 500 or response.status_code == 503
    assert served.proc.poll() is None
