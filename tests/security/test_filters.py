"""The filters and guards of the hardening, without an engine: the terminal sanitiser, the HTTP
body limit and token list, client identities, the doctor's gVisor check."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from sandbox.backends.base import EngineDescription
from sandbox.cli.doctor import RUNSC_DAEMON_JSON, _runtime
from sandbox.config import SandboxConfig
from sandbox.mcp.clients import ANONYMOUS_CLIENT, LOCAL_CLIENT, client_of
from sandbox.mcp.http import Guard, allowed_hosts, allowed_origins, check_bind
from sandbox.shell.markers import MarkerScanner, shell_rc
from sandbox.terminal.transcript import sanitize_terminal

DRAWING = b"\x1b[2J\x1b[H\x1b[10;5Hx\x1b[K\x1b[3A\x1b[2C"
SCREENS = b"\x1b[?1049h\x1b[?25lx\x1b[?25h\x1b[?1049l"


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        (b"a\x1b]52;c;c2VjcmV0\x07b", b"ab"),  # clipboard write
        (b"a\x1b]52;c;c2VjcmV0\x1b\\b", b"ab"),  # ... ended by ST
        (b"\x1b]0;title\x07\x1b]2;t\x07x", b"x"),  # titles
        (b"\x1b]8;;http://e.x/\x07link\x1b]8;;\x07", b"link"),  # hyperlink
        (b"\x1b]10;?\x07\x1b]11;?\x07x", b"x"),  # colour queries (answered as typed input)
        (b"\x1bP1$qm\x1b\\x", b"x"),  # DECRQSS
        (b"\x1bPtmux;\x1b\x1b]52;c;eA==\x07\x1b\\y", b"y"),  # tmux passthrough
        (b"\x1b_apc\x1b\\\x1b^pm\x1b\\\x1bXsos\x1b\\z", b"z"),
        (b"\x1b[6n\x1b[5n\x1b[c\x1b[>c\x1b[=c\x1b[>q", b""),  # queries
        (b"\x1b[21t\x1b[14t\x1b[8;100;100t\x1b[2t", b""),  # window reports and ops
        (b"\x1b[?1000h\x1b[?1006h\x1b[?2004h\x1b[?1004h", b""),  # mouse, paste, focus
        (b"\x1bc\x1b[!p\x1b[?5$p", b""),  # resets, DECRQM
        (b"\x07\x0e\x0fx\x00", b"x"),  # bell, charset shifts, NUL
        (b"\xc2\x9d52;c;x\x07\xc2\x9b6n", b"52;c;x6n"),  # C1 forms lose their control
        (b"tail\x1b]52;c;unterminated", b"tail"),
        (b"\x1b[8mhidden\x1b[0m", b"hidden\x1b[0m"),  # concealed becomes visible
        (b"\x1b[1;8;31mx", b"\x1b[1;31mx"),
        (b"\x1b[38;5;8mgrey\x1b[48;2;8;8;8mbg", b"\x1b[38;5;8mgrey\x1b[48;2;8;8;8mbg"),
        (b"\x1b[31mred\x1b[0m \x1b[1;4mbold\x1b[m", b"\x1b[31mred\x1b[0m \x1b[1;4mbold\x1b[m"),
        (DRAWING, DRAWING),
        (SCREENS, SCREENS),
        (b"\x1b7x\x1b8\x1bM\x1b(0q\x1b(B", b"\x1b7x\x1b8\x1bM\x1b(0q\x1b(B"),
        ("é日🎉\r\n\t".encode(), "é日🎉\r\n\t".encode()),
    ],
)
def test_sanitize_terminal_keeps_drawing_and_drops_acting(raw: bytes, kept: bytes) -> None:
    assert sanitize_terminal(raw) == kept


def test_sanitize_terminal_never_raises_and_leaves_no_string_sequence() -> None:
    import random

    rng = random.Random(7)
    alphabet = b"\x1b\x07\x9b\x9d\xc2[]P_^X\\;?0123456789mhlHJKcqtn abc"
    for _ in range(2000):
        data = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        out = sanitize_terminal(data)
        assert not re.search(rb"\x1b[\]P_^X]", out), (data, out)
        assert b"\x07" not in out


def test_forged_ready_and_exit_markers_carry_no_token() -> None:
    rc = shell_rc("abc123")
    assert "exit;%s;abc123" in rc
    assert "ready;%s;abc123" in rc
    forged = b"\x1b]777;sb;ready;1\x07\x1b]777;sb;exit;0\x07"
    genuine = b"\x1b]777;sb;ready;8;abc123\x07\x1b]777;sb;exit;3;abc123\x07"
    markers = MarkerScanner().scan(forged + genuine, 0)
    assert [(m.kind, m.token) for m in markers] == [
        ("ready", ""),
        ("exit", ""),
        ("ready", "abc123"),
        ("exit", "abc123"),
    ]
    start = MarkerScanner().scan(b"\x1b]777;sb;n1;S;4242\x07", 0)[0]
    assert (start.kind, start.last_pid) == ("start", 4242)


async def echo_body(request: Request) -> PlainTextResponse:
    return PlainTextResponse(str(len(await request.body())))


@pytest.fixture
def guarded() -> Iterator[TestClient]:
    inner = Starlette(routes=[Route("/mcp", echo_body, methods=["POST", "GET"])])
    hosts = allowed_hosts("127.0.0.1", 8765)
    app = Guard(
        inner,
        token="one",
        tokens=("two",),
        hosts=hosts,
        origins=allowed_origins(hosts),
        max_body=1000,
    )
    with TestClient(app, base_url="http://127.0.0.1:8765") as client:
        yield client


def test_guard_accepts_every_configured_token(guarded: TestClient) -> None:
    for token, status in (("one", 200), ("two", 200), ("three", 401), ("", 401)):
        response = guarded.post("/mcp", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == status


def test_guard_refuses_large_bodies_declared_or_streamed(guarded: TestClient) -> None:
    auth = {"Authorization": "Bearer one"}
    assert guarded.post("/mcp", content=b"x" * 1000, headers=auth).text == "1000"
    declared = guarded.post("/mcp", content=b"x" * 1001, headers=auth)
    assert declared.status_code == 413
    assert declared.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"

    def stream() -> Iterator[bytes]:
        for _ in range(5):
            yield b"x" * 300

    streamed = guarded.post("/mcp", content=stream(), headers=auth)
    assert streamed.status_code == 413
    assert guarded.post("/mcp", content=stream(), headers={}).status_code == 401

    def small() -> Iterator[bytes]:
        yield b"y" * 400
        yield b"y" * 400

    assert guarded.post("/mcp", content=small(), headers=auth).text == "800"  # replayed whole


def test_binding_off_loopback_needs_a_token_from_either_variable() -> None:
    check_bind(SandboxConfig(tokens=("t",)), "0.0.0.0")
    with pytest.raises(Exception, match="token"):
        check_bind(SandboxConfig(), "0.0.0.0")


def test_client_identity_comes_from_a_configured_token_only() -> None:
    tokens = ("aa", "bb")
    assert client_of(None, tokens) == LOCAL_CLIENT
    a = client_of({"authorization": "Bearer aa"}, tokens)
    b = client_of({"authorization": "bearer bb"}, tokens)
    assert a != b
    assert a.startswith("token-")
    assert "aa" not in a
    assert client_of({"authorization": "Bearer cc"}, tokens) == ANONYMOUS_CLIENT
    assert client_of({}, ()) == ANONYMOUS_CLIENT


def test_token_quota_defaults_to_an_even_share() -> None:
    assert SandboxConfig(max_sessions=32).token_quota == 32
    assert SandboxConfig(max_sessions=32, token="a", tokens=("b", "c", "d")).token_quota == 8
    assert SandboxConfig(max_sessions=4, max_sessions_per_token=10).token_quota == 4
    env = SandboxConfig.from_env({"SANDBOX_TOKENS": "x,y", "SANDBOX_HTTP_MAX_BODY_BYTES": "2048"})
    assert env.all_tokens == ("x", "y")
    assert env.http_max_body_bytes == 2048


def engine_with(*runtimes: str) -> EngineDescription:
    return EngineDescription("Docker Engine", "20.10", "1.41", tuple(runtimes))


def test_doctor_says_whether_runsc_is_registered_and_how_to_register_it() -> None:
    missing = _runtime(engine_with("runc"), None)
    assert missing.status == "info"
    assert "not registered" in missing.detail
    assert RUNSC_DAEMON_JSON in missing.fix
    assert "--network=none" in missing.render()
    present = _runtime(engine_with("runc", "runsc"), None)
    assert "runsc is registered" in present.detail
    assert "SANDBOX_RUNTIME=runsc" in present.detail
    offered = _runtime(engine_with("runc", "runsc"), None, "runsc")
    assert "may ask" in offered.detail
    used = _runtime(engine_with("runc", "runsc"), "runsc")
    assert used.status == "ok"
    wanted = _runtime(engine_with("runc"), "runsc")
    assert wanted.status == "FAIL"
    assert "daemon.json" in wanted.fix


def test_the_stray_process_sweep_refuses_to_run_outside_a_sandbox_container() -> None:
    """It kills every process of its user born after a pid: on a host (a fake backend runs
    control commands there, as root in CI) that would be everything. Run here with its kills
    made harmless, it must refuse: PID 1 of a host is not the keepalive's uid."""
    import subprocess

    from sandbox.shell.sweep import SWEEP_SCRIPT

    script = (
        SWEEP_SCRIPT.replace("@KEEPALIVE@", "65534")
        .replace("@AFTER@", "-1")
        .replace("@SHELL@", "1")
        .replace("@DURABLE@", "0")
        .replace("@ROUNDS@", "1")
        .replace("kill -STOP", "echo would-stop")
        .replace("kill -KILL", "echo would-kill")
    )
    assert "kill -" not in script
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert done.stdout.strip() == "swept -2"


def test_a_fake_backend_session_never_sweeps(tmp_path: Path) -> None:
    from sandbox.backends.fake import FakeBackend
    from sandbox.models import CreateRequest
    from sandbox.session.manager import SessionManager

    project = tmp_path / "proj"
    project.mkdir()
    backend = FakeBackend()
    manager = SessionManager(
        SandboxConfig(state_dir=tmp_path / "state", allowed_roots=(tmp_path,), idle_ttl_s=0),
        backend,
    )
    try:
        created = manager.create(CreateRequest(project_path=str(project)))
        session = manager.get(created.session_id)
        result = session.execute("sleep 30", timeout_s=0.5)
        assert result.timed_out
        assert result.stray_processes_killed == 0
        assert session.sweep(None) == 0
        assert not any("swept" in " ".join(argv) for argv in backend.runs)
    finally:
        manager.close()
