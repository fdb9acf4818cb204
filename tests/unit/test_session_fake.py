"""Sessions and the manager on the fake backend: the real shell protocol on a host pty."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.backends.fake import FakeBackend
from sandbox.config import SandboxConfig
from sandbox.errors import (
    EngineUnavailableError,
    ImageNotFoundError,
    InvalidArgumentError,
    PathNotAllowedError,
    SessionBusyError,
    SessionExitedError,
    SessionLimitError,
    SessionNotFoundError,
)
from sandbox.models import CreateRequest
from sandbox.session.manager import SessionManager
from sandbox.session.session import Session


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "proj").mkdir()
    return tmp_path


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
def manager(root: Path, backend: FakeBackend) -> Iterator[SessionManager]:
    config = SandboxConfig(
        state_dir=root / "state", allowed_roots=(root,), max_sessions=3, max_timeout_s=60
    )
    mgr = SessionManager(config, backend)
    yield mgr
    mgr.close()


@pytest.fixture
def session(manager: SessionManager, root: Path) -> Session:
    created = manager.create(CreateRequest(project_path=str(root / "proj")))
    return manager.get(created.session_id)


def test_execute_exact_output_and_exit_code(session: Session) -> None:
    result = session.execute(
        "echo out; echo err >&2; exit_code() { return 7; }; exit_code", timeout_s=5
    )
    assert (result.output, result.exit_code) == ("out\nerr\n", 7)


def test_answers_cursor_position_queries_so_programs_do_not_hang(session: Session) -> None:
    command = r"""printf 'ab\033[6n'; IFS= read -rs -d R reply; echo; echo "got ${reply#*[}" """
    result = session.execute(command, timeout_s=5)
    assert not result.timed_out
    row, col = result.output.splitlines()[-1].removeprefix("got ").split(";")
    assert int(row) >= 1
    assert col == "3"  # after "ab": the screen's real cursor, 1-based


def test_scrollback_pages_from_the_end(session: Session) -> None:
    session.execute("seq 1 500", timeout_s=5)
    session.read(view="new", idle_ms=50, timeout_ms=1000)  # the prompt is the last line
    last = session.read(view="scrollback", limit=3, offset=1)
    assert last.content.splitlines()[-1] == "500"
    assert last.has_more
    earlier = session.read(view="scrollback", limit=2, offset=2)  # skip the prompt and 500
    assert earlier.content.splitlines() == ["498", "499"]


def test_new_view_returns_output_since_last_read_once(session: Session) -> None:
    session.execute("(sleep 0.2; echo later) &", timeout_s=5)
    first = session.read(view="new", wait_for="later", timeout_ms=3000)
    assert first.matched
    second = session.read(view="new")
    assert "later" not in second.content


def test_keys_and_notation_reach_the_program(session: Session) -> None:
    session.execute("cat -v", timeout_s=2, background=True)
    session.send(keys=["^A", "[UP]", "tab", "enter"])
    read = session.read(view="new", wait_for=r"\^A\^\[\[A", timeout_ms=3000)
    assert read.matched
    session.send(keys=["ctrl+d"])
    assert session.wait_done(3)


def test_interactive_program_via_idle_timeout_and_send(session: Session) -> None:
    result = session.execute("read -r name; echo hello $name", timeout_s=5, idle_timeout_s=0.3)
    assert result.still_running
    assert session.busy
    session.send(text="agent\n")
    assert session.wait_done(3)
    assert session.execute("echo next", timeout_s=5).output == "next\n"


def test_second_execute_waits_its_turn_or_fails_busy(session: Session) -> None:
    session.execute("sleep 3", timeout_s=0.5, background=True)
    with pytest.raises(SessionBusyError) as info:
        session.execute("echo blocked", timeout_s=0.3)
    assert info.value.code == "SESSION_BUSY"
    session.signal("INT")


def test_concurrent_executes_serialize(session: Session) -> None:
    outs: list[str] = []
    threads = [
        threading.Thread(
            target=lambda t=t: outs.append(
                session.execute(f"echo {t}1; sleep 0.1; echo {t}2", timeout_s=5).output
            )
        )
        for t in "abc"
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outs) == ["a1\na2\n", "b1\nb2\n", "c1\nc2\n"]


def test_timeout_escalates_and_reports_signals(session: Session) -> None:
    result = session.execute("trap '' INT; sleep 30", timeout_s=0.5)
    assert result.timed_out
    assert result.signals_sent[:2] == ["SIGINT", "SIGTERM"]
    assert result.exit_code == 143
    assert session.execute("echo ok", timeout_s=5).output == "ok\n"


def test_read_log_pages_exactly_and_never_cuts_utf8(session: Session) -> None:
    session.execute("for i in $(seq 1 200); do echo 'é日🎉'; done", timeout_s=5)
    total = session.log.size
    pages, offset = [], 0
    while True:
        chunk = session.read_log(from_byte=offset, max_bytes=1000)
        pages.append(chunk.chunk)
        offset = chunk.next_byte
        if chunk.eof:
            break
    assert offset == total
    assert "\ufffd" not in "".join(pages)
    assert "".join(pages).encode() == session.log.read(0, total)
    tail = session.read_log(from_byte=-10)
    assert tail.from_byte == total - 10


def test_read_log_limits_are_errors(session: Session) -> None:
    with pytest.raises(InvalidArgumentError):
        session.read_log(max_bytes=2 * 1024 * 1024)


def test_invalid_regex_and_view_are_clear_errors(session: Session) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        session.read(wait_for="(unclosed")
    assert "regular expression" in info.value.message
    with pytest.raises(InvalidArgumentError):
        session.read(view="everything")


def test_unknown_key_is_invalid_argument(session: Session) -> None:
    with pytest.raises(InvalidArgumentError):
        session.send(keys=["hyperspace"])


def test_exit_makes_the_session_exited(session: Session) -> None:
    result = session.execute("exit 4", timeout_s=5)
    assert result.shell_exited
    assert result.exit_code == 4
    with pytest.raises(SessionExitedError):
        session.send(text="x")
    assert session.read().exited


def test_session_limit(manager: SessionManager, root: Path) -> None:
    for _ in range(3):
        manager.create(CreateRequest(project_path=str(root / "proj")))
    with pytest.raises(SessionLimitError) as info:
        manager.create(CreateRequest(project_path=str(root / "proj")))
    assert info.value.code == "SESSION_LIMIT"


def test_unknown_session(manager: SessionManager) -> None:
    with pytest.raises(SessionNotFoundError):
        manager.info("missing")


def test_timeout_above_the_maximum_is_refused(manager: SessionManager, session: Session) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        manager.execute("true", session_id=session.id, timeout_s=3600)
    assert "background" in info.value.hint


def test_execute_by_project_path_creates_then_reuses(manager: SessionManager, root: Path) -> None:
    first = manager.execute("echo $SANDBOX_SESSION", project_path=str(root / "proj"))
    again = manager.execute("echo $SANDBOX_SESSION", project_path=str(root / "proj"))
    assert first.session_id == again.session_id == first.output.strip()


def test_path_outside_roots_is_refused(manager: SessionManager) -> None:
    with pytest.raises(PathNotAllowedError):
        manager.create(CreateRequest(project_path="/"))


def test_missing_custom_image_is_image_not_found(root: Path, backend: FakeBackend) -> None:
    config = SandboxConfig(state_dir=root / "s8", allowed_roots=(root,), allowed_images=("nope:1",))
    mgr = SessionManager(config, backend)
    try:
        with pytest.raises(ImageNotFoundError):
            mgr.create(CreateRequest(project_path=str(root / "proj"), image="nope:1"))
    finally:
        mgr.close()


def test_missing_default_image_is_built_with_progress(root: Path) -> None:
    backend = FakeBackend(images=())
    lines: list[str] = []
    config = SandboxConfig(state_dir=root / "s2", allowed_roots=(root,))
    mgr = SessionManager(config, backend, on_build_line=lines.append)
    try:
        mgr.create(CreateRequest(project_path=str(root / "proj")))
        assert any("building" in line for line in lines)
        assert "sandbox-session:latest" in backend.images
    finally:
        mgr.close()


def test_engine_down_is_engine_unavailable(
    manager: SessionManager, backend: FakeBackend, root: Path
) -> None:
    backend.available = False
    with pytest.raises(EngineUnavailableError) as info:
        manager.create(CreateRequest(project_path=str(root / "proj")))
    assert info.value.code == "ENGINE_UNAVAILABLE"
    backend.available = True


def test_destroy_busy_needs_force(manager: SessionManager, session: Session) -> None:
    session.execute("sleep 5", timeout_s=1, background=True, idle_timeout_s=0.1)
    with pytest.raises(SessionBusyError):
        manager.destroy(session.id)
    assert manager.destroy(session.id, force=True).destroyed
    with pytest.raises(SessionNotFoundError):
        manager.get(session.id)


def test_close_destroys_every_session(root: Path, backend: FakeBackend) -> None:
    mgr = SessionManager(SandboxConfig(state_dir=root / "s3", allowed_roots=(root,)), backend)
    mgr.create(CreateRequest(project_path=str(root / "proj")))
    mgr.create(CreateRequest(project_path=str(root / "proj")))
    mgr.close()
    assert backend.containers == {}


def test_gc_removes_containers_of_dead_servers_only(root: Path, backend: FakeBackend) -> None:
    config = SandboxConfig(state_dir=root / "s4", allowed_roots=(root,))
    dead = SessionManager(config, backend)
    dead.create(CreateRequest(project_path=str(root / "proj")))
    dead.locks._server.close()  # type: ignore[union-attr]  # the server "dies": its lock is released
    dead.locks._server = None
    alive = SessionManager(config, backend)
    mine = alive.create(CreateRequest(project_path=str(root / "proj")))
    try:
        assert len(alive.gc(dry_run=True)) == 1
        removed = alive.gc()
        assert len(removed) == 1
        assert [c.id for c in backend.containers.values()] == [mine.container_id]
    finally:
        alive.close()


def test_command_session_runs_argv_instead_of_a_shell(manager: SessionManager, root: Path) -> None:
    created = manager.create(
        CreateRequest(project_path=str(root / "proj"), command=["python3", "-q"])
    )
    session = manager.get(created.session_id)
    with pytest.raises(InvalidArgumentError):
        session.execute("true", timeout_s=1)
    session.send(text="print(6 * 7)\n")
    assert session.read(view="screen", wait_for="42", timeout_ms=5000).matched


def test_bad_env_and_workdir_are_refused(manager: SessionManager, root: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        manager.create(CreateRequest(project_path=str(root / "proj"), env={"1BAD": "x"}))
    with pytest.raises(InvalidArgumentError):
        manager.create(CreateRequest(project_path=str(root / "proj"), workdir="relative"))


def test_new_view_keeps_typed_input_after_an_execute(session: Session) -> None:
    # a stale "skip the next prompt" mark once swallowed everything typed after an execute
    for i in range(10):
        session.execute("true", timeout_s=5)
        session.read(view="new", idle_ms=50, timeout_ms=1000)  # let the prompt arrive
        session.send(text=f"echo typed-{i}\n")
        read = session.read(view="new", wait_for=f"typed-{i}\\s+typed-{i}", timeout_ms=3000)
        assert read.matched, read.content


def test_screen_and_scrollback_show_the_command_not_the_protocol_line(session: Session) -> None:
    session.execute("echo visible-output", timeout_s=5)
    session.resize(24, 200)  # the test's prompt (a long tmp path) would wrap at 80 columns
    session.execute("echo visible-output", timeout_s=5)
    screen = session.read(view="screen").content
    assert "echo visible-output" in screen
    assert "__sb_" not in screen
    assert "eval $'" not in screen
    scrollback = session.read(view="scrollback").content
    assert "echo visible-output" in scrollback
    assert "__sb_" not in scrollback


def test_cancel_while_waiting_for_the_turn_returns_promptly(session: Session) -> None:
    session.execute("sleep 5", timeout_s=0.3, background=True)
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    result = session.execute("echo never", timeout_s=30, cancel=cancel)
    assert result.interrupted
    assert result.exit_code is None
    assert result.output == ""
    session.signal("INT")


def test_send_with_wait_returns_the_programs_answer(session: Session) -> None:
    session.execute("cat", timeout_s=0.3, background=True)
    session.read(view="new", idle_ms=200, timeout_ms=1000)
    sent = session.send(text="ping\n", wait_ms=3000)
    assert sent.bytes_sent == 5
    assert sent.content is not None
    assert sent.content.count("ping") == 2  # the echo and cat's answer
    session.send(keys=["ctrl+d"])


def test_gc_never_takes_a_container_another_server_is_still_starting(
    root: Path, backend: FakeBackend
) -> None:
    # a server elsewhere (another state dir: its liveness is unknown to us) is creating one
    other = SessionManager(SandboxConfig(state_dir=root / "s5", allowed_roots=(root,)), backend)
    me = SessionManager(SandboxConfig(state_dir=root / "s6", allowed_roots=(root,)), backend)
    try:
        created = other.create(CreateRequest(project_path=str(root / "proj")))
        backend.containers[created.container_id].status = "created"  # not started yet
        assert created.container_id not in {s.id for s in me.orphans()}
        backend.containers[created.container_id].status = "exited"  # it ended: collect it
        assert created.container_id in {s.id for s in me.orphans()}
    finally:
        me.close()
        other.close()


def test_a_client_cannot_pick_an_image_or_runtime_the_server_does_not_allow(
    manager: SessionManager, root: Path, backend: FakeBackend
) -> None:
    backend.images.add("evil:latest")
    with pytest.raises(InvalidArgumentError) as info:
        manager.create(CreateRequest(project_path=str(root / "proj"), image="evil:latest"))
    assert "SANDBOX_ALLOWED_IMAGES" in info.value.hint
    with pytest.raises(InvalidArgumentError):
        manager.create(CreateRequest(project_path=str(root / "proj"), runtime="runc-evil"))


def test_allowed_images_and_runtimes_are_configurable(root: Path, backend: FakeBackend) -> None:
    backend.images.add("team/tools:1")
    config = SandboxConfig.from_env(
        {
            "SANDBOX_STATE_DIR": str(root / "s7"),
            "SANDBOX_ALLOWED_ROOTS": str(root),
            "SANDBOX_ALLOWED_IMAGES": "team/tools:1, other:2",
        }
    )
    assert config.allowed_images == ("team/tools:1", "other:2")
    mgr = SessionManager(config, backend)
    try:
        created = mgr.create(CreateRequest(project_path=str(root / "proj"), image="team/tools:1"))
        assert created.image == "team/tools:1"
    finally:
        mgr.close()


def test_sessions_created_and_destroyed_in_a_row_each_get_their_own_output(
    root: Path, backend: FakeBackend
) -> None:
    # a destroyed session's reader must never read the next session's (reused) pty fd
    mgr = SessionManager(
        SandboxConfig(state_dir=root / "s9", allowed_roots=(root,), max_sessions=2), backend
    )
    try:
        for i in range(30):
            created = mgr.create(CreateRequest(project_path=str(root / "proj")))
            assert mgr.execute(f"echo round-{i}", session_id=created.session_id).output == (
                f"round-{i}\n"
            )
            mgr.destroy(created.session_id, force=True)
    finally:
        mgr.close()


def test_a_streaming_execute_hands_over_output_while_its_command_still_runs(
    session: Session,
) -> None:
    # a chunk without a marker wakes a streaming execute's wait (a plain one sleeps through it)
    got: list[bytes] = []
    first = threading.Event()

    def on_output(data: bytes) -> None:
        got.append(data)
        if b"first" in b"".join(got):
            first.set()

    release = session.log.path.with_name("release")
    done: list[str] = []
    runner = threading.Thread(
        target=lambda: done.append(
            session.execute(
                f"sleep 0.3; echo first; until [ -e {release} ]; do sleep 0.01; done; echo second",
                timeout_s=30,
                on_output=on_output,
            ).output
        )
    )
    runner.start()
    try:
        # well before the wait's own 2 s liveness check would have woken it
        assert first.wait(1.0), b"".join(got)
        assert not done  # handed over before the command ended
    finally:
        release.touch()
        runner.join(30)
    assert done == ["first\nsecond\n"]
    assert b"".join(got).replace(b"\r\n", b"\n") == b"first\nsecond\n"
