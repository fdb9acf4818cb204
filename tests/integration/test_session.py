"""Sessions against a real engine: screen, interactive programs, limits, security defaults."""

from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from sandbox.backends.docker import DockerBackend
from sandbox.config import LABEL_MANAGED, LABEL_SESSION
from sandbox.errors import InvalidArgumentError, PathNotAllowedError, SessionNotFoundError
from sandbox.models import CreateRequest
from sandbox.session.manager import SessionManager
from sandbox.session.session import Session
from tests.conftest import make_project
from tests.hardening import assert_hardened

pytestmark = pytest.mark.docker


@pytest.fixture
def session(manager: SessionManager, project: Path) -> Iterator[Session]:
    created = manager.create(CreateRequest(project_path=str(project)))
    yield manager.get(created.session_id)
    manager.destroy(created.session_id, force=True)


def test_container_carries_the_contract_labels_and_security_profile(
    manager: SessionManager, session: Session, docker_client: docker.DockerClient
) -> None:
    c = docker_client.containers.get(session.container_id)
    assert c.labels[LABEL_MANAGED] == "true"
    assert c.labels[LABEL_SESSION] == session.id
    host = c.attrs["HostConfig"]
    assert_hardened(host, podman=DockerBackend(docker_client).is_podman)
    assert host["ReadonlyRootfs"] is True
    assert host["Init"] is True
    assert host["PidsLimit"] == 256
    assert host["Memory"] == host["MemorySwap"] == 512 * 1024 * 1024
    assert host["NetworkMode"] == "none"
    assert all("size=" in opts for opts in host["Tmpfs"].values())
    result = session.execute("id -u; cat /proc/1/status | grep -i '^uid'", timeout_s=10)
    lines = result.output.splitlines()
    assert lines[0] != "0"
    assert "65534" in lines[1]


def test_shell_is_not_root_and_cannot_write_the_root_filesystem(session: Session) -> None:
    result = session.execute(
        "touch /usr/x 2>&1; echo $?; grep CapEff /proc/self/status", timeout_s=10
    )
    assert "Read-only file system" in result.output or "Permission denied" in result.output
    assert "CapEff:\t0000000000000000" in result.output


def test_files_created_in_workspace_belong_to_the_project_owner(
    manager: SessionManager,
) -> None:
    project = make_project("owned", owner=(1234, 2345))
    created = manager.create(CreateRequest(project_path=str(project)))
    try:
        result = manager.execute("touch made-here && id -u", session_id=created.session_id)
        assert result.output == "1234\n"
        st = (project / "made-here").stat()
        assert (st.st_uid, st.st_gid) == (1234, 2345)
    finally:
        manager.destroy(created.session_id, force=True)


def test_network_is_off_by_default_and_on_when_asked(
    manager: SessionManager, project: Path
) -> None:
    off = manager.create(CreateRequest(project_path=str(project)))
    on = manager.create(CreateRequest(project_path=str(project), network=True))
    try:
        r_off = manager.execute("ls /sys/class/net", session_id=off.session_id)
        r_on = manager.execute("ls /sys/class/net", session_id=on.session_id)
        assert r_off.output.split() == ["lo"]
        assert "eth0" in r_on.output.split()
        assert not off.network
        assert on.network
    finally:
        manager.destroy(off.session_id, force=True)
        manager.destroy(on.session_id, force=True)


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("relative/path", "INVALID_ARGUMENT"),
        ("", "INVALID_ARGUMENT"),
        ("/does/not/exist", "INVALID_ARGUMENT"),
        ("/", "PATH_NOT_ALLOWED"),
        ("/etc", "PATH_NOT_ALLOWED"),
        ("/var/run/docker.sock", "PATH_NOT_ALLOWED"),
        ("/usr/lib", "PATH_NOT_ALLOWED"),
    ],
)
def test_bad_project_paths_are_refused(manager: SessionManager, path: str, code: str) -> None:
    with pytest.raises((InvalidArgumentError, PathNotAllowedError)) as info:
        manager.create(CreateRequest(project_path=path))
    assert info.value.code == code
    assert info.value.hint


def test_symlink_out_of_the_allowed_roots_is_refused(
    manager: SessionManager, project: Path
) -> None:
    link = project / "escape"
    link.symlink_to("/etc")
    with pytest.raises(PathNotAllowedError):
        manager.create(CreateRequest(project_path=str(link)))


def test_unknown_session_is_session_not_found(manager: SessionManager) -> None:
    with pytest.raises(SessionNotFoundError) as info:
        manager.get("nope")
    assert info.value.code == "SESSION_NOT_FOUND"


def test_limits_above_the_maximum_are_refused(manager: SessionManager, project: Path) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        manager.create(CreateRequest(project_path=str(project), memory_mb=10**6))
    assert "maximum" in info.value.message


def test_vim_edits_a_host_file_through_the_alternate_screen(
    session: Session, project: Path
) -> None:
    (project / "notes.txt").write_text("first line\n")
    os.chown(project / "notes.txt", 1000, 1000) if os.geteuid() == 0 else None
    session.execute("vim -u NONE -N notes.txt", timeout_s=5, background=True)
    screen = session.read(view="screen", wait_for="first line", timeout_ms=5000)
    assert screen.matched
    assert screen.alternate_screen
    session.send(keys=["G", "o"])
    session.send(text="added by the agent", paste=False)
    session.send(keys=["escape"])
    session.send(text=":wq\r", paste=False)
    assert session.wait_done(5)
    assert (project / "notes.txt").read_text() == "first line\nadded by the agent\n"
    back = session.read(view="screen")
    assert not back.alternate_screen
    assert session.execute("echo back", timeout_s=10).output == "back\n"


def test_full_screen_curses_program_is_drawn_on_the_screen(session: Session) -> None:
    script = (
        "import curses, time\n"
        "def main(w):\n"
        "    w.addstr(5, 10, 'CURSES-HELLO')\n"
        "    w.refresh(); time.sleep(30)\n"
        "curses.wrapper(main)\n"
    )
    session.execute(f"cat > /tmp/c.py <<'EOF'\n{script}EOF", timeout_s=10)
    session.execute("python3 /tmp/c.py", timeout_s=3, background=True)
    screen = session.read(view="screen", wait_for="CURSES-HELLO", timeout_ms=5000)
    assert screen.matched
    assert screen.alternate_screen
    row = next(i for i, line in enumerate(screen.content.split("\n")) if "CURSES-HELLO" in line)
    assert row == 5
    assert screen.content.split("\n")[5].index("CURSES-HELLO") == 10
    stopped = session.signal("INT")
    assert stopped.stopped
    assert session.execute("echo after-curses", timeout_s=10).output == "after-curses\n"


def test_top_runs_full_screen_and_is_stopped(session: Session) -> None:
    session.execute("top -d 0.5", timeout_s=3, background=True)
    screen = session.read(view="screen", wait_for="PID", timeout_ms=5000)
    assert screen.matched
    session.send(keys=["q"])
    assert session.wait_done(5)


def test_resize_changes_what_programs_see(session: Session) -> None:
    session.resize(30, 100)
    assert session.execute("stty size", timeout_s=10).output == "30 100\n"
    assert session.read(view="screen").cols == 100


def test_python_repl_keys_and_screen(session: Session) -> None:
    # generous bounds: a loaded machine (CI beside other work) starts python3 slowly. Screen
    # rows lose their trailing spaces: ">>> " would never match (the read would only wait).
    session.execute("python3 -q", timeout_s=3, background=True)
    assert session.read(view="screen", wait_for=">>>", timeout_ms=20_000).matched
    session.send(text="6 * 7\r", paste=False)
    read = session.read(view="screen", wait_for="42", timeout_ms=20_000)
    assert read.matched
    session.send(keys=["ctrl+d"])
    assert session.wait_done(20)


def test_fork_bomb_is_contained_and_the_session_recovers(session: Session) -> None:
    result = session.execute(":(){ :|:& };:", timeout_s=5)
    assert result.timed_out or result.exit_code is not None
    after = session.execute("echo survived", timeout_s=30)
    # The bomb is a background job: until the pids limit starves it out (bash retries a failed
    # fork for a while), its "fork: retry" complaints can land around the next command's
    # output, as they would in any terminal.
    assert after.exit_code == 0
    assert "survived" in after.output.splitlines()


def test_memory_hog_is_reported_as_oom(session: Session) -> None:
    hog = "python3 -c \"x = bytearray(2 * 1024**3); print('allocated')\""
    result = session.execute(hog, timeout_s=60)
    assert result.exit_code == 137
    assert result.oom_killed
    info = session.info("x")
    assert info.oom_killed
    assert session.execute("echo ok", timeout_s=10).output == "ok\n"


def test_info_reports_foreground_cwd_and_usage(manager: SessionManager, session: Session) -> None:
    session.execute("cd /tmp && sleep 30", timeout_s=2, background=True)
    info = manager.info(session.id)
    assert info.busy
    assert info.foreground is not None
    assert "sleep 30" in info.foreground
    assert info.cwd == "/tmp"
    assert info.usage.memory_mb is not None
    assert info.usage.memory_mb > 0
    assert info.usage.pids is not None
    assert info.usage.pids >= 2
    assert "docker exec" in info.attach_command
    stopped = session.signal("INT")
    assert stopped.stopped
    assert stopped.foreground_before is not None
    assert "sleep" in stopped.foreground_before


def test_fifty_megabytes_of_output_keeps_server_memory_bounded(session: Session) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = session.execute("head -c 37500000 /dev/urandom | base64", timeout_s=120, max_lines=3)
    assert result.exit_code == 0
    assert result.truncated
    assert len(result.output.splitlines()) == 3
    size = result.log_range.to_byte - result.log_range.from_byte
    assert size > 50_000_000
    growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert growth_mb < 64
    # the whole output can be paged from the log
    chunk = session.read_log(from_byte=result.log_range.from_byte, max_bytes=1024 * 1024)
    pages = 1
    while not chunk.eof and chunk.next_byte < result.log_range.to_byte:
        chunk = session.read_log(from_byte=chunk.next_byte, max_bytes=1024 * 1024)
        pages += 1
    assert pages == -(-size // (1024 * 1024))  # every byte of the range, page by page


def test_ten_sessions_run_in_parallel(manager: SessionManager) -> None:
    projects = [make_project(f"par{i}") for i in range(10)]
    created = [manager.create(CreateRequest(project_path=str(p))) for p in projects]
    outputs: dict[str, list[str]] = {}

    def run(sid: str) -> None:
        command = f"date +%s%N; sleep 1; echo {sid}; date +%s%N"
        outputs[sid] = manager.execute(command, session_id=sid).output.split()

    try:
        threads = [threading.Thread(target=run, args=(c.session_id,)) for c in created]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert {sid: out[1] for sid, out in outputs.items()} == {
            c.session_id: c.session_id for c in created
        }
        # they ran at the same time: every command started before any of them ended
        assert max(int(o[0]) for o in outputs.values()) < min(int(o[2]) for o in outputs.values())
    finally:
        for c in created:
            manager.destroy(c.session_id, force=True)


def test_tmpfs_and_file_size_limits_are_errors_not_crashes(
    docker_client: docker.DockerClient, allowed_root: Path
) -> None:
    from tests.integration.conftest import make_config

    small = SessionManager(make_config(allowed_root, tmp_mb=16, fsize_mb=8))
    try:
        created = small.create(CreateRequest(project_path=str(make_project("limits"))))
        tmp = small.execute(
            "for i in 1 2 3 4; do head -c 6M /dev/zero > /tmp/f$i || exit_code=1; done; "
            "(exit ${exit_code:-0})",
            session_id=created.session_id,
        )
        assert tmp.exit_code != 0
        assert "No space left on device" in tmp.output
        big = small.execute(
            "head -c 20M /dev/zero > /workspace/big; echo code=$?; stat -c %s /workspace/big",
            session_id=created.session_id,
        )
        lines = big.output.splitlines()
        assert lines[-2] != "code=0"  # SIGXFSZ: the write beyond the limit failed
        assert int(lines[-1]) <= 8 * 1024 * 1024
        assert small.execute("echo fine", session_id=created.session_id).output == "fine\n"
    finally:
        small.close()


def test_signal_escalates_until_the_job_is_gone(session: Session) -> None:
    stubborn = (
        'python3 -c "import signal,time; signal.signal(2, signal.SIG_IGN); '
        "print('ready', flush=True); time.sleep(600)\""
    )
    session.execute(stubborn, timeout_s=5, background=True)
    result = session.signal("INT")
    assert result.stopped
    assert result.signals_sent == ["SIGINT", "SIGTERM"]
    assert result.foreground_before is not None
    assert "python3" in result.foreground_before
    assert result.foreground_after is None
    assert session.wait_done(5)


def test_signal_without_escalation_sends_exactly_one(session: Session) -> None:
    session.execute("sleep 600", timeout_s=1, background=True)
    result = session.signal("TSTP", escalate_=False)
    assert result.signals_sent == ["SIGTSTP"]
    assert session.wait_done(5)  # a stopped job gives the prompt back (status 148)
    assert session.execute("kill %1 2>/dev/null; echo ok", timeout_s=10).output.endswith("ok\n")


def test_warm_pool_serves_labelled_sessions_and_cleans_up(
    docker_client: docker.DockerClient, allowed_root: Path
) -> None:
    from tests.integration.conftest import make_config

    config = make_config(allowed_root, warm_pool=1, owner=f"pool-{os.getpid()}")
    pooled = SessionManager(config)
    label = {"label": [f"{LABEL_MANAGED}=true", f"sandbox.owner={config.owner}"]}
    try:
        project = make_project("pool")
        first = pooled.create(CreateRequest(project_path=str(project)))
        assert pooled._pool is not None
        for _ in range(300):
            if pooled._pool.count() == 1:
                break
            time.sleep(0.1)
        ready = {c.id for c in docker_client.containers.list(filters=label)} - {first.container_id}
        assert len(ready) == 1
        second = pooled.create(CreateRequest(project_path=str(project)))
        assert second.container_id in ready
        c = docker_client.containers.get(second.container_id)
        assert c.labels[LABEL_SESSION] == second.session_id
        assert pooled.execute("id -u", session_id=second.session_id).output == "1000\n"
    finally:
        pooled.close()
    assert docker_client.containers.list(all=True, filters=label) == []


def test_an_unattended_flood_is_drained_at_the_budget_and_loses_nothing(session: Session) -> None:
    # Defaults: past a 1 MiB burst, 256 KiB/s while no execute, read or person waits.
    total = 8 << 20
    start = session.log.size
    started = session.execute(
        f"sleep 1; head -c {total} /dev/zero | tr '\\0' Q; echo; echo flood-$((6*7))",
        background=True,
        timeout_s=0.5,
    )
    assert started.still_running
    time.sleep(3.0)  # the flood runs for 2 s with nobody waiting
    unattended = session.log.size - start
    assert unattended < (5 << 20) // 2  # 1 MiB + 2 s at 256 KiB/s + a read; unthrottled: 8 MiB
    read = session.read(wait_for="flood-42", timeout_ms=60_000)  # attending: full speed again
    assert read.matched
    flood = session.log.read(start, session.log.size)
    assert total <= flood.count(b"Q") <= total + 4  # the typed command line has one Q
