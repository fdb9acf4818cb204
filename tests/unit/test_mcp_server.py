"""The MCP tools through the SDK's in-memory client, on the fake backend (no Docker).

Every call is bounded by ``anyio.fail_after``; nothing waits by sleeping.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import Client
from mcp_types import CallToolResult

from sandbox.backends.fake import FakeBackend
from sandbox.config import SandboxConfig
from sandbox.errors import ERROR_CODES
from sandbox.mcp.server import build_server
from sandbox.mcp.tools import split_enter
from sandbox.session.manager import SessionManager
from tests.served import payload

pytestmark = pytest.mark.anyio

TOOLS = {
    "session_create",
    "session_list",
    "session_info",
    "session_destroy",
    "execute",
    "send",
    "read",
    "signal",
    "resize",
    "read_log",
    "server_info",
    "session_update",
}
LIMIT_S = 20  # upper bound of any single test step


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def config(allowed_root: Path, tmp_path: Path) -> SandboxConfig:
    return SandboxConfig(
        owner=f"mcptest-{secrets.token_hex(4)}",
        state_dir=tmp_path / "state",
        allowed_roots=(allowed_root,),
        max_sessions=4,
        max_timeout_s=120,
        allowed_images=("nope:1",),  # allowed, but not present on the engine
    )


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
def manager(config: SandboxConfig, backend: FakeBackend) -> Iterator[SessionManager]:
    mgr = SessionManager(config, backend)
    yield mgr
    mgr.close()


@pytest.fixture
async def client(config: SandboxConfig, manager: SessionManager) -> AsyncIterator[Client]:
    async with Client(build_server(config, manager)) as c:
        yield c


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed; check text and structured content agree."""
    with anyio.fail_after(LIMIT_S):
        result = await client.call_tool(tool, arguments)
    await _conforms(client, tool, result)
    data = _data(result)
    assert not result.is_error, data
    return data


async def fail(client: Client, tool: str, **arguments: Any) -> dict[str, str]:
    """Call a tool that must fail; return the contract's error object."""
    with anyio.fail_after(LIMIT_S):
        result = await client.call_tool(tool, arguments)
    await _conforms(client, tool, result)
    data = _data(result)
    assert result.is_error, data
    error = data["error"]
    assert set(error) == {"code", "message", "hint"}
    assert error["code"] in ERROR_CODES
    assert error["message"]
    assert error["hint"]
    return dict(error)


async def _conforms(client: Client, tool: str, result: CallToolResult) -> None:
    """What the TypeScript SDK's ``callTool`` checks (errors included): structured content,
    when present, validates against the tool's declared output schema."""
    listed = {t.name: t for t in (await client.list_tools()).tools}
    schema = listed[tool].output_schema
    assert schema is not None, f"{tool} declares no output schema"
    if result.structured_content is not None:
        jsonschema.validate(result.structured_content, schema)


def _data(result: CallToolResult) -> dict[str, Any]:
    return payload(result)


async def create(client: Client, project: Path, **extra: Any) -> str:
    data = await call(client, "session_create", project_path=str(project), **extra)
    return str(data["session_id"])


# -- listing --------------------------------------------------------------------------------
async def test_lists_the_contract_tools_and_session_update_with_schemas_and_annotations(
    client: Client,
) -> None:
    with anyio.fail_after(LIMIT_S):
        listed = (await client.list_tools()).tools
    by_name = {t.name: t for t in listed}
    assert set(by_name) == TOOLS
    for tool in listed:
        assert tool.description
        assert "Example" in tool.description
        assert tool.output_schema is not None
        assert tool.input_schema["type"] == "object"
    for name in ("session_list", "session_info", "read", "read_log", "server_info"):
        annotations = by_name[name].annotations
        assert annotations is not None
        assert annotations.read_only_hint is True
    for name in ("session_destroy", "signal"):
        annotations = by_name[name].annotations
        assert annotations is not None
        assert annotations.destructive_hint is True
    execute = by_name["execute"]
    timeout = execute.input_schema["properties"]["timeout_s"]
    assert timeout["maximum"] == 120
    assert execute.description is not None
    assert "background" in execute.description
    assert "read_log" in execute.description


# -- sessions -------------------------------------------------------------------------------
async def test_session_create_list_info_destroy(client: Client, project: Path) -> None:
    created = await call(client, "session_create", project_path=str(project), name="web")
    sid = created["session_id"]
    assert created["name"] == "web"
    assert created["project_path"] == str(project)
    assert created["limits"]["memory_mb"] > 0

    listed = await call(client, "session_list")
    assert listed["count"] == 1
    assert listed["sessions"][0]["session_id"] == sid
    assert listed["sessions"][0]["status"] == "running"

    info = await call(client, "session_info", session_id=sid)
    assert info["status"] == "running"
    assert info["busy"] is False
    assert "attach_command" in info
    assert info["log_bytes"] > 0

    destroyed = await call(client, "session_destroy", session_id=sid)
    assert destroyed["destroyed"] is True
    assert (await call(client, "session_list"))["count"] == 0


async def test_server_info_reports_defaults_and_counts(client: Client, project: Path) -> None:
    await create(client, project)
    info = await call(client, "server_info")
    assert info["engine"]["name"] == "Fake"
    assert info["defaults"]["timeout_s"] == 30
    assert info["session_count"] == 1
    assert info["max_sessions"] == 4


# -- execute --------------------------------------------------------------------------------
async def test_execute_returns_output_and_a_nonzero_exit_code_as_data(
    client: Client, project: Path
) -> None:
    sid = await create(client, project)
    ok = await call(client, "execute", session_id=sid, command="echo one; echo two")
    assert ok["output"] == "one\ntwo\n"
    assert ok["exit_code"] == 0
    failed = await call(
        client,
        "execute",
        session_id=sid,
        command="echo oops >&2; exit_with() { return 3; }; exit_with",
    )
    assert failed["exit_code"] == 3
    assert "oops" in failed["output"]
    multi = await call(client, "execute", session_id=sid, command="cd /tmp\nX=5\necho $X $PWD")
    assert multi["output"] == "5 /tmp\n"
    again = await call(client, "execute", session_id=sid, command="echo $X")
    assert again["output"] == "5\n"


async def test_execute_with_project_path_creates_then_reuses_the_session(
    client: Client, project: Path
) -> None:
    first = await call(client, "execute", project_path=str(project), command="echo hi")
    second = await call(client, "execute", project_path=str(project), command="echo again")
    assert first["session_id"] == second["session_id"]
    assert (await call(client, "session_list"))["count"] == 1


async def test_execute_timeout_stops_the_command_and_is_not_an_error(
    client: Client, project: Path
) -> None:
    sid = await create(client, project)
    result = await call(
        client, "execute", session_id=sid, command="echo start; sleep 30", timeout_s=1
    )
    assert result["timed_out"] is True
    assert result["signals_sent"][0] == "SIGINT"
    assert "start" in result["output"]
    after = await call(client, "execute", session_id=sid, command="echo alive")
    assert after["output"] == "alive\n"


async def test_execute_truncates_to_max_lines_and_read_log_pages_the_rest(
    client: Client, project: Path
) -> None:
    sid = await create(client, project)
    result = await call(client, "execute", session_id=sid, command="seq 1 500", max_lines=10)
    assert result["truncated"] is True
    assert result["total_lines"] == 500
    assert result["output"].splitlines() == [str(i) for i in range(491, 501)]
    start, end = result["log_range"]["from_byte"], result["log_range"]["to_byte"]
    text, offset = "", start
    while offset < end:
        page = await call(
            client, "read_log", session_id=sid, from_byte=offset, max_bytes=min(256, end - offset)
        )
        text += page["chunk"]
        offset = page["next_byte"]
    assert text.replace("\r\n", "\n").splitlines() == [str(i) for i in range(1, 501)]
    tail = await call(client, "read_log", session_id=sid, from_byte=-10)
    assert tail["eof"] is True
    assert tail["next_byte"] == tail["total_bytes"]


async def test_execute_sends_progress_notifications(client: Client, project: Path) -> None:
    sid = await create(client, project)
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    with anyio.fail_after(LIMIT_S):
        result = await client.call_tool(
            "execute",
            {"session_id": sid, "command": "for i in 1 2 3; do echo line$i; sleep 0.8; done"},
            progress_callback=on_progress,
        )
    assert not result.is_error
    assert len(seen) >= 1
    assert [p for p, _ in seen] == sorted(p for p, _ in seen)
    assert any(m and "line" in m for _, m in seen)


async def test_cancelling_execute_stops_the_command_and_frees_the_session(
    client: Client, project: Path
) -> None:
    sid = await create(client, project)
    with anyio.fail_after(LIMIT_S):
        async with anyio.create_task_group() as tg:

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                tg.cancel_scope.cancel()  # the command runs: cancel the call

            tg.start_soon(
                lambda: client.call_tool(
                    "execute",
                    {"session_id": sid, "command": "echo go; sleep 600"},
                    progress_callback=on_progress,
                )
            )
    info = await call(client, "session_info", session_id=sid)
    assert info["busy"] is False
    after = await call(client, "execute", session_id=sid, command="echo free", timeout_s=5)
    assert after["output"] == "free\n"


async def test_background_execute_returns_while_running_then_signal_stops_it(
    client: Client, project: Path
) -> None:
    sid = await create(client, project)
    started = await call(
        client,
        "execute",
        session_id=sid,
        command="echo serving; sleep 600",
        background=True,
    )
    assert started["still_running"] is True
    assert started["exit_code"] is None
    assert "serving" in started["output"]
    stopped = await call(client, "signal", session_id=sid)
    assert stopped["stopped"] is True
    assert stopped["signals_sent"][:1] == ["SIGINT"]
    after = await call(client, "execute", session_id=sid, command="echo done")
    assert after["output"] == "done\n"


# -- terminal -------------------------------------------------------------------------------
async def test_send_with_wait_returns_what_appears_and_read_views_work(
    client: Client, project: Path
) -> None:
    sid = await create(client, project)
    await call(client, "execute", session_id=sid, command="true")
    sent = await call(client, "send", session_id=sid, text="echo typed-$((6*7))\n", wait_ms=3000)
    assert sent["bytes_sent"] > 0
    assert "typed-42" in sent["content"]
    only = await call(client, "send", session_id=sid, text="echo later-$((1+1))", keys=["Enter"])
    assert set(only) == {"bytes_sent"}
    waited = await call(client, "read", session_id=sid, wait_for="later-2", timeout_ms=5000)
    assert waited["matched"] is True
    screen = await call(client, "read", session_id=sid, view="SCREEN")
    assert "later-2" in screen["content"]
    assert screen["rows"] == 24
    assert screen["cols"] == 80
    history = await call(client, "read", session_id=sid, view="scrollback", limit=3)
    assert history["lines"] <= 3


async def test_send_keys_accept_any_case_and_notations(client: Client, project: Path) -> None:
    sid = await create(client, project)
    await call(client, "execute", session_id=sid, command="true")
    await call(client, "send", session_id=sid, text="sleep 600", keys=["ENTER"])
    await call(client, "read", session_id=sid, wait_for="sleep 600", timeout_ms=3000)
    await call(client, "send", session_id=sid, keys=["Ctrl+C"])
    await call(client, "send", session_id=sid, keys="^C")  # a single key as a string
    await call(client, "send", session_id=sid, keys='["[UP]", "escape"]')  # JSON-encoded list
    after = await call(client, "execute", session_id=sid, command="echo ok", timeout_s=5)
    assert after["output"] == "ok\n"


async def test_resize_changes_the_screen(client: Client, project: Path) -> None:
    sid = await create(client, project)
    assert await call(client, "resize", session_id=sid, rows=40, cols=120) == {
        "rows": 40,
        "cols": 120,
    }
    screen = await call(client, "read", session_id=sid, view="screen")
    assert (screen["rows"], screen["cols"]) == (40, 120)


async def test_session_running_a_command_takes_send_and_read(client: Client, project: Path) -> None:
    sid = await create(client, project, command=["bash", "--norc", "-i"])
    sent = await call(client, "send", session_id=sid, text="echo from-$((2*21))\n", wait_ms=3000)
    assert "from-42" in sent["content"]


# -- forgiving input ------------------------------------------------------------------------
async def test_numbers_and_booleans_as_strings_and_nulls_are_accepted(
    client: Client, project: Path
) -> None:
    created = await call(
        client,
        "session_create",
        project_path=str(project),
        rows="30",
        cols=" 100 ",
        read_only_project="false",
        network=None,
        name=None,
        env='{"GREETING": "hi"}',
    )
    sid = created["session_id"]
    assert (created["rows"], created["cols"]) == (30, 100)
    result = await call(
        client,
        "execute",
        session_id=sid,
        command="echo $GREETING",
        timeout_s="10",
        max_lines="5",
        strip_ansi="TRUE",
        background="false",
        idle_timeout_s=None,
    )
    assert result["output"] == "hi\n"
    await call(client, "resize", session_id=sid, rows="30", cols="90")
    await call(client, "read_log", session_id=sid, from_byte="-100", strip_ansi="yes")
    await call(client, "session_destroy", session_id=sid, force="false")


async def test_signal_names_in_any_form(client: Client, project: Path) -> None:
    sid = await create(client, project)
    for name in ("sigint", "Term", 15, "9", "SIGKILL"):
        result = await call(client, "signal", session_id=sid, signal=name, escalate="false")
        assert result["signals_sent"] == []  # nothing runs in the foreground


def test_split_enter_presses_enter_after_an_explicit_paste() -> None:
    assert split_enter("a\nb\n", ["tab"], True) == ("a\nb", ["enter", "tab"])
    assert split_enter("ls\r\n", None, True) == ("ls", ["enter"])
    assert split_enter("\n", None, True) == (None, ["enter"])
    assert split_enter("ls\n", None, "auto") == ("ls\n", None)  # keys.encode_text does it
    assert split_enter("ls\n", None, False) == ("ls\n", None)
    assert split_enter("ls", ["enter"], True) == ("ls", ["enter"])


async def test_pasted_multi_line_text_runs(client: Client, project: Path) -> None:
    sid = await create(client, project)
    await call(client, "execute", session_id=sid, command="true")
    for n, paste in enumerate((True, "auto", False)):
        text = f"echo a$((40 + {n}))\necho b$((40 + {n}))\n"
        await call(client, "send", session_id=sid, text=text, paste=paste)
        ran = await call(client, "read", session_id=sid, wait_for=f"b4{n}\n", timeout_ms=5000)
        assert ran["matched"] is True, (paste, ran["content"])


# -- errors ---------------------------------------------------------------------------------
async def test_invalid_arguments_name_the_field(client: Client, project: Path) -> None:
    sid = await create(client, project)
    bad_type = await fail(client, "execute", session_id=sid, command="true", timeout_s="soon")
    assert bad_type["code"] == "INVALID_ARGUMENT"
    assert "timeout_s" in bad_type["message"]
    assert "timeout_s" in bad_type["hint"]
    missing = await fail(client, "execute", session_id=sid)
    assert missing["code"] == "INVALID_ARGUMENT"
    assert "command" in missing["message"]
    unknown = await fail(client, "read", session_id=sid, colour="red")
    assert "colour" in unknown["message"]
    assert "wait_for" in unknown["hint"]
    too_long = await fail(client, "execute", session_id=sid, command="true", timeout_s=121)
    assert too_long["code"] == "INVALID_ARGUMENT"
    assert "background" in too_long["hint"]
    neither = await fail(client, "execute", command="true")
    assert neither["code"] == "INVALID_ARGUMENT"
    bad_view = await fail(client, "read", session_id=sid, view="everything")
    assert "view" in bad_view["message"]
    bad_paste = await fail(client, "send", session_id=sid, text="x", paste="maybe")
    assert "paste" in bad_paste["message"]
    assert "auto" in bad_paste["hint"]
    bad_key = await fail(client, "send", session_id=sid, keys=["hyperspace"])
    assert bad_key["code"] == "INVALID_ARGUMENT"
    bad_size = await fail(client, "resize", session_id=sid, rows=1, cols=80)
    assert "rows" in bad_size["message"]
    too_big = await fail(client, "read_log", session_id=sid, max_bytes=2**21)
    assert "max_bytes" in too_big["message"]
    bad_regex = await fail(client, "read", session_id=sid, wait_for="(", timeout_ms=10)
    assert bad_regex["code"] == "INVALID_ARGUMENT"
    long_wait = await fail(client, "read", session_id=sid, timeout_ms=10**9)
    assert "timeout_ms" in long_wait["message"]
    bad_signal = await fail(client, "signal", session_id=sid, signal="STOPIT")
    assert "signal" in bad_signal["message"]
    path_type = await fail(client, "session_create", project_path=42)
    assert path_type["code"] == "INVALID_ARGUMENT"
    assert "project_path" in path_type["message"]
    relative = await fail(client, "session_create", project_path="relative/dir")
    assert relative["code"] in ("INVALID_ARGUMENT", "PATH_NOT_ALLOWED")


async def test_path_outside_the_allowed_roots_is_refused(client: Client) -> None:
    error = await fail(client, "session_create", project_path="/etc")
    assert error["code"] == "PATH_NOT_ALLOWED"
    via_execute = await fail(client, "execute", project_path="/usr/share", command="true")
    assert via_execute["code"] == "PATH_NOT_ALLOWED"


async def test_unknown_session_is_session_not_found(client: Client) -> None:
    for tool, extra in (
        ("session_info", {}),
        ("session_destroy", {}),
        ("execute", {"command": "true"}),
        ("send", {"text": "x"}),
        ("read", {}),
        ("signal", {}),
        ("resize", {"rows": 10, "cols": 20}),
        ("read_log", {}),
    ):
        error = await fail(client, tool, session_id="nope", **extra)
        assert error["code"] == "SESSION_NOT_FOUND", tool


async def test_too_many_sessions_is_session_limit(client: Client, project: Path) -> None:
    for _ in range(4):
        await create(client, project)
    error = await fail(client, "session_create", project_path=str(project))
    assert error["code"] == "SESSION_LIMIT"


async def test_a_shell_that_exited_is_session_exited_until_execute_revives_it(
    client: Client, project: Path
) -> None:
    sid = await create(client, project)
    gone = await call(client, "execute", session_id=sid, command="exit 3")
    assert gone["shell_exited"] is True
    assert gone["notices"]
    error = await fail(client, "send", session_id=sid, text="echo hi\n")
    assert error["code"] == "SESSION_EXITED"
    assert "execute" in error["hint"]
    info = await call(client, "session_info", session_id=sid)
    assert info["status"] == "running"
    revived = await call(client, "execute", session_id=sid, command="true")
    assert revived["shell_restarted"] is True
    assert revived["exit_code"] == 0


async def test_destroying_a_busy_session_is_session_busy_unless_forced(
    client: Client, project: Path
) -> None:
    sid = await create(client, project)
    await call(client, "execute", session_id=sid, command="sleep 600", background=True)
    error = await fail(client, "session_destroy", session_id=sid)
    assert error["code"] == "SESSION_BUSY"
    assert (await call(client, "session_destroy", session_id=sid, force=True))["destroyed"]


async def test_engine_down_is_engine_unavailable(
    client: Client, backend: FakeBackend, project: Path
) -> None:
    backend.available = False
    assert (await fail(client, "server_info"))["code"] == "ENGINE_UNAVAILABLE"
    error = await fail(client, "session_create", project_path=str(project))
    assert error["code"] == "ENGINE_UNAVAILABLE"


async def test_missing_image_is_image_not_found(client: Client, project: Path) -> None:
    error = await fail(client, "session_create", project_path=str(project), image="nope:1")
    assert error["code"] == "IMAGE_NOT_FOUND"


async def test_an_image_the_server_does_not_allow_is_refused(client: Client, project: Path) -> None:
    error = await fail(client, "session_create", project_path=str(project), image="evil:1")
    assert error["code"] == "INVALID_ARGUMENT"
    assert "SANDBOX_ALLOWED_IMAGES" in error["hint"]


async def test_unexpected_exception_is_internal_and_logged(
    client: Client, manager: SessionManager, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    def broken() -> None:
        raise RuntimeError("kaput")

    monkeypatch.setattr(manager, "list_sessions", broken)
    with caplog.at_level(logging.ERROR, logger="sandbox.mcp.server"):
        error = await fail(client, "session_list")
    assert error["code"] == "INTERNAL"
    assert "kaput" in error["message"]
    crash = [r for r in caplog.records if r.name == "sandbox.mcp.server"]
    assert crash
    assert crash[0].exc_info is not None


# -- egress allow-lists (the engine side is tests/integration/test_egress.py) ---------------
async def test_an_allow_list_on_an_engine_without_networks_is_invalid_argument(
    client: Client, project: Path
) -> None:
    error = await fail(
        client, "session_create", project_path=str(project), network=["pkg.test", "*.x.org"]
    )
    assert error["code"] == "INVALID_ARGUMENT"
    assert "allow-list" in error["message"]
    error = await fail(client, "session_create", project_path=str(project), network=["*"])
    assert "bad host pattern" in error["message"]
    assert "*.github.com" in error["hint"]


async def test_a_client_cannot_widen_the_servers_allow_list(
    config: SandboxConfig, project: Path
) -> None:
    listed = config.model_copy(update={"egress_allow": ("pkg.test",)})
    mgr = SessionManager(listed, FakeBackend())
    async with Client(build_server(listed, mgr)) as c:
        error = await fail(c, "session_create", project_path=str(project), network="evil.org")
        assert "evil.org" in error["message"]
        assert "pkg.test" in error["hint"]
        error = await fail(c, "session_create", project_path=str(project), network=True)
        assert "full network" in error["message"]
        info = await call(c, "server_info")
        assert info["egress"]["allow"] == ["pkg.test"]
        assert info["egress"]["clients_may_widen"] is False
    mgr.close()


async def test_session_update_needs_a_session_with_an_allow_list(
    client: Client, project: Path
) -> None:
    sid = await create(client, project)
    error = await fail(client, "session_update", session_id=sid, network=["pkg.test"])
    assert error["code"] == "INVALID_ARGUMENT"
    assert "no egress allow-list" in error["message"]
    assert (await call(client, "session_info", session_id=sid))["egress"] is None
