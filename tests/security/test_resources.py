"""Resource exhaustion: every limit holds, the session survives or is reset, the server and the
other sessions are not affected. Limits come from ``conftest.TIGHT`` so each case is quick.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import docker
import pytest

from sandbox.models import ExecResult
from sandbox.session.manager import SessionManager
from sandbox.session.profile import is_gvisor
from sandbox.session.session import Session
from tests.security.conftest import TIGHT, open_session

pytestmark = pytest.mark.docker

MiB = 1024 * 1024


def works(session: Session) -> None:
    result = session.execute("echo still-$((6*7))", timeout_s=15)
    assert result.output == "still-42\n", result


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def process_count(session: Session) -> int:
    return int(session.execute("ps -e --no-headers | wc -l", timeout_s=10).output.strip())


def test_a_fork_bomb_is_stopped(fresh: Session) -> None:
    result = fresh.execute("bomb() { bomb | bomb & }; bomb; sleep 1000", timeout_s=3)
    if is_gvisor(fresh.spec.runtime) and result.shell_exited and not result.timed_out:
        # gVisor: on a loaded machine the bomb can kill the sandbox itself (the sentry's
        # WaitPID fails) before the ladder runs; the session then ends at once and says so.
        assert_sandbox_ended(result)
        return
    assert result.timed_out
    assert result.session_reset or result.stray_processes_killed > 0, result
    works(fresh)
    assert process_count(fresh) < 10


HOLD_EVERY_PID = """
import os, signal, time
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
try:
    while True:
        if os.fork() == 0:
            os.setsid()
            while True:
                time.sleep(60)
except OSError:
    print("full", flush=True)
time.sleep(1000)
"""


def test_a_pids_limit_so_full_that_not_even_exec_starts_resets_the_container(
    fresh: Session,
) -> None:
    fresh.execute(f"cat > /tmp/hold.py <<'EOF'\n{HOLD_EVERY_PID}\nEOF", timeout_s=10)
    gvisor = is_gvisor(fresh.spec.runtime)
    # under gVisor the sandbox dies in seconds: a longer timeout than that shows it is noticed
    result = fresh.execute("python3 /tmp/hold.py", timeout_s=20 if gvisor else 4)
    if gvisor:
        # gVisor: ~90 processes outgrow the sandbox's 256 MB before its process limit; the
        # sentry dies of it, and the session ends, says why, and leaves nothing running.
        assert_sandbox_died_of_memory(result)
        return
    assert "full" in result.output
    assert result.timed_out
    assert result.session_reset, result
    assert result.exit_code == 137
    assert fresh.resets == 1
    assert "the container was reset" in fresh.read_log(-300).chunk
    works(fresh)
    assert process_count(fresh) < 10


def test_a_fork_bomb_left_in_the_background_is_stopped_by_the_next_timeout(
    fresh: Session,
) -> None:
    started = fresh.execute("bomb() { bomb | bomb & }; bomb", timeout_s=3)
    assert not started.still_running
    stuck = fresh.execute("sleep 1000", timeout_s=2)
    assert stuck.timed_out
    assert not stuck.still_running
    works(fresh)
    assert process_count(fresh) < 10


FORK_UNTIL_REFUSED = """
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as exc:
    print("refused after", n, exc.errno, flush=True)
os.killpg(0, 9)
"""


def test_the_pids_limit_caps_processes(fresh: Session) -> None:
    fresh.execute(f"cat > /tmp/fork.py <<'EOF'\n{FORK_UNTIL_REFUSED}\nEOF", timeout_s=10)
    result = fresh.execute("python3 /tmp/fork.py", timeout_s=20)
    if is_gvisor(fresh.spec.runtime) and result.shell_exited:
        # gVisor enforces the process limit (RLIMIT_NPROC: "refused after 94 11" with 1 GB),
        # but 90-odd Python processes outgrow 256 MB first: the sandbox dies of memory
        assert_sandbox_died_of_memory(result)
        return
    assert result.exit_code == 137  # it killed its own group once refused
    words = result.output.split()
    assert words[:2] == ["refused", "after"], result.output
    assert int(words[2]) < TIGHT["pids"]
    assert words[3] == "11"  # EAGAIN
    works(fresh)


def test_memory_is_capped_and_an_oom_is_reported(fresh: Session) -> None:
    result = fresh.execute(
        f"python3 -c 'b = bytearray({TIGHT['memory_mb'] * 2} * 2**20); print(len(b))'",
        timeout_s=30,
    )
    if is_gvisor(fresh.spec.runtime):  # the sentry holds the memory: it is what the OOM kills
        assert_sandbox_died_of_memory(result)
        return
    assert result.exit_code == 137
    assert result.oom_killed
    works(fresh)


def assert_sandbox_ended(result: ExecResult) -> None:
    """How a session ends when its gVisor sandbox dies under it: at once, nothing left running,
    the way out in the result."""
    assert result.shell_exited, result
    assert not result.still_running
    assert result.duration_ms < 15_000, result
    assert any("this session has ended" in n for n in result.notices), result.notices


def assert_sandbox_died_of_memory(result: ExecResult) -> None:
    """How a gVisor session ends when its sandbox runs out of memory: at once (not at the
    command's timeout), with the shell gone, the OOM and the way out in the result."""
    assert result.shell_exited, result
    assert result.oom_killed, result
    assert not result.still_running
    assert result.duration_ms < 15_000, result
    assert any("ran out of memory" in n for n in result.notices), result.notices


@pytest.mark.parametrize(
    ("path", "size_mb"),
    [("/tmp", TIGHT["tmp_mb"]), ("/home/sandbox", TIGHT["home_mb"]), ("/var/tmp", 64)],
)
def test_tmpfs_mounts_fill_up_to_their_size_only(fresh: Session, path: str, size_mb: int) -> None:
    result = fresh.execute(
        f"for i in $(seq {size_mb * 2 // 4 + 2}); do head -c 4M /dev/zero > {path}/fill$i"
        f" || break; done; du -sk {path}",
        timeout_s=20,
    )
    assert "No space left on device" in result.output
    written_kib = int(result.output.strip().splitlines()[-1].split()[0])
    assert written_kib <= size_mb * 1024
    works(fresh)


def test_every_tmpfs_full_at_once_still_leaves_the_session_usable(fresh: Session) -> None:
    fresh.execute(
        "for d in /tmp /var/tmp ~ /dev/shm; do head -c 200M /dev/zero > $d/fill 2>/dev/null; done;"
        " true",
        timeout_s=30,
    )
    works(fresh)
    assert fresh.execute("python3 -c 'print(1)'", timeout_s=15).output == "1\n"


def test_the_project_mount_is_capped_by_the_file_size_limit(fresh: Session) -> None:
    result = fresh.execute(
        f"head -c {TIGHT['fsize_mb'] * 3}M /dev/zero > big.bin; echo rc=$?", timeout_s=20
    )
    assert "rc=153" in result.output or "File size limit exceeded" in result.output
    project = Path(fresh.spec.project_path)
    assert (project / "big.bin").stat().st_size <= TIGHT["fsize_mb"] * MiB
    works(fresh)


def test_a_sessions_own_command_is_capped_by_the_file_size_limit_too(
    sec_manager: SessionManager, sec_project: Path
) -> None:
    """On Podman the cap is the first process's (no engine ulimit): a command session too."""
    script = f"head -c {TIGHT['fsize_mb'] * 3}M /dev/zero > big.bin; echo $? > rc.txt; sleep 60"
    with open_session(sec_manager, sec_project, command=["sh", "-c", script]):
        deadline = time.monotonic() + 20
        while not (sec_project / "rc.txt").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.2)
        assert (sec_project / "rc.txt").read_text().strip() not in ("", "0")
        assert (sec_project / "big.bin").stat().st_size <= TIGHT["fsize_mb"] * MiB


@pytest.mark.parametrize(
    "command",
    [
        "head -c 30000000 /dev/zero | tr '\\0' x",  # one 30 MB line
        "seq 1 4000000",  # 30 MB of short lines
        "head -c 20000000 /dev/urandom",  # binary, invalid UTF-8, escape sequences
    ],
    ids=["no-newlines", "newlines", "binary"],
)
def test_output_floods_are_bounded_everywhere(fresh: Session, command: str) -> None:
    before = rss_mib()
    result = fresh.execute(command, timeout_s=30, max_lines=50)
    assert result.exit_code is not None
    assert len(result.output.encode()) <= 2 * fresh.execute_max_bytes
    assert result.truncated
    assert fresh.log.stored <= TIGHT["log_max_bytes"] + 1024  # the log file stops growing
    assert rss_mib() - before < 200
    works(fresh)


def test_writing_to_pid_1s_output_cannot_fill_the_engines_logs(
    fresh: Session, engine: docker.DockerClient
) -> None:
    result = fresh.execute(
        "for f in /proc/1/fd/1 /proc/1/fd/2 /dev/console; do"
        " (echo spam > $f) 2>/dev/null && echo wrote:$f; done; echo done",
        timeout_s=10,
    )
    assert "wrote:/proc/1" not in result.output
    assert engine.api.logs(fresh.container_id) == b""


def test_one_sessions_cpu_and_output_hog_does_not_starve_another(
    sec_manager: SessionManager, sec_project: Path
) -> None:
    other_project = sec_project / "other"
    other_project.mkdir()
    os.chown(other_project, 1000, 1000)
    with (
        open_session(sec_manager, sec_project) as hog,
        open_session(sec_manager, other_project) as quiet,
    ):
        hog.execute(
            "(while :; do :; done) & (while :; do :; done) & yes 'flood flood flood'",
            timeout_s=1,
            background=True,
        )
        answers: list[str] = []

        def ask() -> None:
            for i in range(5):
                answers.append(quiet.execute(f"echo quiet-{i}", timeout_s=30).output)

        asker = threading.Thread(target=ask)
        asker.start()
        asker.join(timeout=120)
        assert not asker.is_alive()
        assert answers == [f"quiet-{i}\n" for i in range(5)]
        assert hog.signal("INT").stopped


def test_tmpfs_larger_than_memory_cannot_brick_the_session(
    sec_manager: SessionManager, sec_project: Path
) -> None:
    # an operator's mistake: tmpfs sizes above the memory limit (their pages are memory). The
    # manager caps the tmpfs mounts at half the memory limit, so filling them is ENOSPC; if
    # memory still runs out, the session resets instead of leaving a shell that cannot start.
    config = sec_manager.config.model_copy(update={"memory_mb": 128, "tmp_mb": 512})
    manager = SessionManager(config, sec_manager.backend)
    try:
        with open_session(manager, sec_project) as session:
            filled = session.execute(
                "for i in $(seq 60); do head -c 6M /dev/zero > /tmp/fill$i || break; done",
                timeout_s=20,
            )
            capped = "No space left on device" in filled.output
            assert capped or filled.session_reset or filled.shell_restarted, filled
            assert not filled.shell_exited
            works(session)
    finally:
        manager.close()
