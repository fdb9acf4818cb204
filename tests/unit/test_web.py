"""The web view on the fake backend: take over and its notice, the terminal as a person sees it
(pages that join up, no protocol lines), the replayed recording, and the HTTP app's sign-in,
per-token visibility and checks (in-process, with Starlette's test client)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from starlette.testclient import TestClient

from sandbox.backends.fake import FakeBackend
from sandbox.config import SandboxConfig
from sandbox.errors import SessionBusyError
from sandbox.mcp.http import build_app
from sandbox.mcp.server import Tools, build_server
from sandbox.models import CreateRequest
from sandbox.session.live_view import display_chunk
from sandbox.session.manager import SessionManager
from sandbox.session.session import Session
from sandbox.web.terminal import follow, replay_cast, start_offset

TOKEN, OTHER = "a" * 32, "b" * 32
BASE = "http://127.0.0.1:8765"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "proj").mkdir()
    return tmp_path


@pytest.fixture
def config(root: Path) -> SandboxConfig:
    return SandboxConfig(
        state_dir=root / "state", allowed_roots=(root,), token=TOKEN, tokens=(OTHER,), web=True
    )


@pytest.fixture
def manager(config: SandboxConfig) -> Iterator[SessionManager]:
    mgr = SessionManager(config, FakeBackend())
    yield mgr
    mgr.close()


@pytest.fixture
def session(manager: SessionManager, root: Path) -> Session:
    created = manager.create(CreateRequest(project_path=str(root / "proj")))
    return manager.get(created.session_id)


@pytest.fixture
def tools(config: SandboxConfig, manager: SessionManager) -> Tools:
    return Tools(config, manager)


@pytest.fixture
def web(config: SandboxConfig, tools: Tools) -> TestClient:
    app = build_app(build_server(config, tools=tools), config, "127.0.0.1", 8765, tools)
    return TestClient(app, base_url=BASE, headers={"Origin": BASE}, follow_redirects=False)


def sign_in(web: TestClient, token: str = TOKEN) -> None:
    response = web.post("/ui/login", data={"token": token})
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/"


def test_a_person_holding_the_terminal_keeps_the_agent_out_and_is_reported_once(
    session: Session,
) -> None:
    session.takeover.take("someone")
    with pytest.raises(SessionBusyError, match="person"):
        session.execute("true", timeout_s=5)
    with pytest.raises(SessionBusyError):
        session.send(text="x")
    session.write_raw(b"cd /\r")
    session.takeover.typed("cd /\r")
    assert "still hold" in session.read(view="new", idle_ms=200, timeout_ms=2000).notices[0]
    session.takeover.typed("echo hi\x03")
    session.takeover.release()
    result = session.execute("pwd", timeout_s=5)
    assert result.output == "/\n"  # what the person did took effect
    assert len(result.notices) == 1
    assert "'echo hi^C'" in result.notices[0]
    assert session.execute("true", timeout_s=5).notices == []


def test_the_terminal_pages_join_up_and_show_commands_not_protocol_lines(
    session: Session,
) -> None:
    session.execute("printf 'caf\\xc3\\xa9 \\033[1mbold\\033[0m\\n'; echo done", timeout_s=5)
    whole, end = display_chunk(session, 0, 1 << 20)
    assert end == session.log.size
    assert b"__sb_s" not in whole
    assert b"echo done" in whole
    assert "café".encode() in whole
    pages, offset = [], 0
    while offset < end:
        page, offset = display_chunk(session, offset, 7)
        pages.append(page)
    assert b"".join(pages) == whole


def test_the_replayed_recording_shows_commands_not_protocol_lines(session: Session) -> None:
    session.execute("echo replayed", timeout_s=5)
    cast = replay_cast(session)
    assert cast is not None
    header, *events = [json.loads(line) for line in cast.splitlines()]
    assert header["version"] == 2
    shown = "".join(e[2] for e in events if e[1] == "o")
    assert "echo replayed" in shown
    assert "__sb_s" not in shown


def test_sign_in_sets_a_strict_cookie_and_shows_only_this_tokens_sessions(
    web: TestClient, tools: Tools, root: Path
) -> None:
    assert web.get("/ui/api/sessions").status_code == 401
    assert web.get("/ui/").headers["location"] == "/ui/login"
    wrong = web.post("/ui/login", data={"token": "nope"})
    assert wrong.headers["location"] == "/ui/login?failed=1"
    # as OTHER's agent would, over MCP
    mine = tools.clients.create("token-other", CreateRequest(project_path=str(root / "proj")))
    response = web.post("/ui/login", data={"token": TOKEN})
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert TOKEN not in cookie
    assert web.get("/ui/api/sessions").json()["sessions"] == []
    assert (
        web.post(f"/ui/api/sessions/{mine.session_id}/signal", json={"signal": "INT"}).status_code
        == 404
    )


def test_typing_needs_the_hold_and_an_allowed_origin(web: TestClient, session: Session) -> None:
    sign_in(web)
    url = f"/ui/api/sessions/{session.id}"
    assert web.post(url + "/input", json={"data": "ls\r"}).json()["error"]["code"] == "NOT_HELD"
    assert (
        web.post(
            url + "/takeover", json={"hold": True}, headers={"Origin": "http://x.example"}
        ).status_code
        == 403
    )
    assert web.post(url + "/takeover", json={"hold": True}).json() == {"held": True}
    assert web.post(url + "/input", json={"data": "echo typed\r"}).status_code == 200
    assert web.post(url + "/signal", json={"signal": "STOP"}).status_code == 400
    assert web.post(url + "/takeover", json={"hold": False}).json() == {"held": False}
    notices = session.read(view="new", idle_ms=200, timeout_ms=2000).notices
    assert "echo typed" in notices[0]
    web.post("/ui/logout")
    assert web.get("/ui/api/sessions").status_code == 401


def test_the_web_view_is_off_unless_asked(config: SandboxConfig, tools: Tools) -> None:
    off = config.model_copy(update={"web": False})
    app = build_app(build_server(off, tools=tools), off, "127.0.0.1", 8765, tools)
    client = TestClient(app, base_url=BASE)
    assert client.get("/ui/login").status_code == 404


def test_the_live_stream_pages_the_log_then_ends_with_the_session(
    manager: SessionManager, session: Session
) -> None:
    session.execute("echo streamed", timeout_s=5)

    async def collect() -> list[tuple[str, dict[str, object]]]:
        events = []
        limiter = anyio.CapacityLimiter(2)
        with anyio.fail_after(20):
            async for raw in follow(session, start_offset(session, -65536), limiter):
                if raw.startswith(b":"):
                    continue
                name, data = raw.decode().split("\n")[:2]
                events.append((name.removeprefix("event: "), json.loads(data[6:])))
                if events[-1][0] == "page":
                    manager.destroy(session.id)
        return events

    events = anyio.run(collect)
    names = [name for name, _ in events]
    assert names[0] == "hello"
    assert names[-1] == "exit"
    shown = b"".join(base64.b64decode(str(d["data"])) for n, d in events if n == "page")
    assert b"echo streamed" in shown


def test_a_hold_that_is_not_renewed_lapses(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    session.takeover.take("someone")
    assert session.takeover.holder == "someone"
    monkeypatch.setattr("sandbox.session.takeover.HOLD_S", -1.0)  # as if 90 s went by
    assert session.takeover.holder is None
    assert session.execute("true", timeout_s=5).exit_code == 0


def test_a_server_without_a_token_signs_a_loopback_person_in_at_once(
    root: Path, manager: SessionManager
) -> None:
    config = SandboxConfig(state_dir=root / "state", allowed_roots=(root,), web=True)
    tools = Tools(config, manager)
    app = build_app(build_server(config, tools=tools), config, "127.0.0.1", 8765, tools)
    client = TestClient(app, base_url=BASE, follow_redirects=False)
    page = client.get("/ui/")
    assert page.status_code == 200
    assert "HttpOnly" in page.headers["set-cookie"]
    assert client.get("/ui/api/sessions").status_code == 200


def test_a_window_of_the_history_ends_where_asked_and_the_next_one_joins_it(
    session: Session,
) -> None:
    session.execute("seq 1 3000", timeout_s=10)

    async def window(start: int, stop: int) -> tuple[bytes, int]:
        shown, last = b"", start
        async for raw in follow(session, start, anyio.CapacityLimiter(1), stop):
            name, data = raw.decode().split("\n")[:2]
            payload = json.loads(data[6:])
            if name == "event: page":
                shown += base64.b64decode(payload["data"])
            if name == "event: end":
                last = payload["next"]
        return shown, last

    session.read(view="new", idle_ms=300, timeout_ms=5000)  # the prompt has come too
    size = session.log.size
    stop = start_offset(session, 5000, align=True)
    first, end = anyio.run(window, 0, stop)
    second, _ = anyio.run(window, end, size)
    whole, _ = display_chunk(session, 0, size)
    assert first + second == whole
    assert first.endswith(b"\n")  # the window ends with a whole line


def test_posts_need_a_small_declared_body(web: TestClient) -> None:
    big = web.post("/ui/login", content=b"token=" + b"x" * 200_000)
    assert big.status_code == 413
    assert big.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"

    def chunks() -> Iterator[bytes]:
        yield b"token=abc"

    assert web.post("/ui/login", content=chunks()).status_code == 413  # no declared length


def test_serve_web_flag_overrides_the_setting() -> None:
    from sandbox.cli.main import build_parser

    assert build_parser().parse_args(["serve"]).web is None  # then SANDBOX_WEB decides
    on = build_parser().parse_args(["serve", "--web"]).web
    off = build_parser().parse_args(["serve", "--no-web"]).web
    environ = {"SANDBOX_WEB": "1"}
    assert SandboxConfig.from_env(environ, web=on).web is True
    assert SandboxConfig.from_env(environ, web=off).web is False
    assert SandboxConfig.from_env(environ, web=None).web is True
    assert SandboxConfig.from_env({}).web is False  # off unless asked
