"""The ``sandbox`` command driven as a subprocess against the real engine.

Every process gets its own owner label (``clitest-<random>``) and state directory; everything
carrying that owner is removed at the end. Waits are bounded by timeouts, never by sleeps.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import secrets
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from sandbox.config import LABEL_MANAGED, LABEL_OWNER, LABEL_SESSION, WORKSPACE
from tests.conftest import make_project

pytestmark = pytest.mark.docker

OWNER = f"clitest-{secrets.token_hex(4)}"
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def cli_env(docker_client: docker.DockerClient, allowed_root: Path) -> Iterator[dict[str, str]]:
    state = make_project("clistate")
    env = {
        **os.environ,
        "SANDBOX_OWNER": OWNER,
        "SANDBOX_STATE_DIR": str(state),
        "SANDBOX_ALLOWED_ROOTS": str(allowed_root),
        "SANDBOX_MEMORY_MB": "512",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("SANDBOX_RUNTIME", None)
    yield env
    for container in _ours(docker_client):
        container.remove(force=True)
    shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = make_project("cliproj")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _ours(client: docker.DockerClient, **labels: str) -> list[Any]:
    filters = [f"{LABEL_MANAGED}=true", f"{LABEL_OWNER}={OWNER}"]
    filters += [f"{k}={v}" for k, v in labels.items()]
    return list(client.containers.list(all=True, filters={"label": filters}))


def sandbox(
    env: dict[str, str], *args: str, cwd: Path | None = None, timeout: float = TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sandbox", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def popen(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "sandbox", *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def read_line(stream: Any, timeout: float = TIMEOUT_S) -> bytes:
    """One line from a pipe, or fail after ``timeout``."""
    fd = stream.fileno()
    data = b""
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no complete line within {timeout} s (got {data!r})"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            chunk = os.read(fd, 1)
            assert chunk, f"stream ended after {data!r}"
            data += chunk
    return data


# -- run -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 3, 130])
def test_run_exits_with_the_commands_code_and_leaves_no_container(
    cli_env: dict[str, str], workdir: Path, docker_client: docker.DockerClient, code: int
) -> None:
    result = sandbox(cli_env, "run", "--", "sh", "-c", f"echo out-{code}; exit {code}", cwd=workdir)
    assert result.returncode == code, result.stderr
    assert result.stdout == f"out-{code}\n"
    assert _ours(docker_client) == []


def test_run_streams_output_while_the_command_runs(
    cli_env: dict[str, str], workdir: Path, docker_client: docker.DockerClient
) -> None:
    proc = popen(cli_env, "run", "--", "sh", "-c", "echo first; sleep 3; echo second", cwd=workdir)
    try:
        assert read_line(proc.stdout) == b"first\n"
        assert proc.poll() is None  # the command is still sleeping: output was not buffered
        out, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        proc.kill()
    assert out == b"second\n", err
    assert proc.returncode == 0
    assert _ours(docker_client) == []


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_mid_run_interrupts_the_command_and_removes_the_container(
    cli_env: dict[str, str],
    workdir: Path,
    docker_client: docker.DockerClient,
    sig: signal.Signals,
    code: int,
) -> None:
    proc = popen(
        cli_env, "run", "--", "sh", "-c", "echo started; sleep 60; echo never", cwd=workdir
    )
    try:
        assert read_line(proc.stdout) == b"started\n"
        assert len(_ours(docker_client)) == 1
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    assert b"never" not in out
    assert _ours(docker_client) == []


def test_a_second_sigint_kills_a_command_that_ignores_the_first(
    cli_env: dict[str, str], workdir: Path, docker_client: docker.DockerClient
) -> None:
    script = "trap '' INT TERM; echo started; while :; do sleep 1; done"
    proc = popen(cli_env, "run", "--", "bash", "-c", script, cwd=workdir)
    try:
        assert read_line(proc.stdout) == b"started\n"
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert _ours(docker_client) == []


def test_run_strips_colours_when_piped(cli_env: dict[str, str], workdir: Path) -> None:
    result = sandbox(
        cli_env, "run", "--", "printf", r"\033[31mred\033[0m\n10%%\r100%%\n", cwd=workdir
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "red\n100%\n"


def test_run_keeps_colours_on_a_terminal(cli_env: dict[str, str], workdir: Path) -> None:
    output, code = _in_pty(
        cli_env, ["run", "--", "printf", r"\033[31mred\033[0m\n"], workdir, b"", b"red"
    )
    assert code == 0
    assert b"\x1b[31mred\x1b[0m" in output


def test_run_flags_reach_the_sandbox(
    cli_env: dict[str, str], workdir: Path, docker_client: docker.DockerClient
) -> None:
    script = (
        'echo "env=$GREETING"; '
        "cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null; "
        "cat /sys/fs/cgroup/cpu.max /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null; "
        "ls /sys/class/net | tr '\\n' ' '; echo; "
        "touch /workspace/f 2>/dev/null && echo rw || echo ro"
    )
    result = sandbox(
        cli_env,
        "run",
        "--env",
        "GREETING=hi there",
        "--memory",
        "300",
        "--cpus",
        "0.5",
        "--read-only-project",
        "--image",
        "sandbox-session:latest",
        "--",
        "sh",
        "-c",
        script,
        cwd=workdir,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "env=hi there"
    assert lines[1] == str(300 * 1024 * 1024)
    assert lines[2] in ("50000", "50000 100000")
    assert lines[3].split() == ["lo"]  # no network by default
    assert lines[4] == "ro"
    networked = sandbox(cli_env, "run", "--network", "--", "ls", "/sys/class/net", cwd=workdir)
    assert networked.returncode == 0, networked.stderr
    assert len(networked.stdout.split()) > 1
    assert _ours(docker_client) == []


def test_run_timeout_stops_the_command_with_code_124(
    cli_env: dict[str, str], workdir: Path, docker_client: docker.DockerClient
) -> None:
    result = sandbox(cli_env, "run", "--timeout", "1", "--", "sleep", "60", cwd=workdir)
    assert result.returncode == 124
    assert "timed out after 1 s" in result.stderr
    assert _ours(docker_client) == []


def test_run_with_a_missing_image_is_one_line_with_a_hint(
    cli_env: dict[str, str], workdir: Path
) -> None:
    result = sandbox(cli_env, "run", "--image", "no-such-image:0", "--", "true", cwd=workdir)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "no-such-image:0" in result.stderr
    assert "hint:" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_refuses_system_directories_even_when_named(cli_env: dict[str, str]) -> None:
    for path in ("/", "/etc"):
        result = sandbox(cli_env, "run", "--project", path, "--", "true")
        assert result.returncode == 1
        assert "hint:" in result.stderr
        assert "Traceback" not in result.stderr


def test_run_in_a_named_directory_outside_the_allowed_roots(cli_env: dict[str, str]) -> None:
    # the person at the keyboard named it: a checkout anywhere works, like `docker run -v`
    outside = Path(tempfile.mkdtemp(prefix="sandbox-cli-outside-", dir="/var/tmp"))
    try:
        outside.chmod(0o755)
        result = sandbox(cli_env, "run", "--", "pwd", cwd=outside)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "/workspace\n"
    finally:
        shutil.rmtree(outside, ignore_errors=True)


# -- ls, logs, kill, gc: sessions of another server process ------------------------------------

SERVER = textwrap.dedent(
    """
    import sys
    from sandbox.config import SandboxConfig
    from sandbox.session.manager import SessionManager
    from sandbox.models import CreateRequest

    manager = SessionManager(SandboxConfig.from_env())
    created = manager.create(CreateRequest(project_path=sys.argv[1], name=sys.argv[2]))
    manager.execute("echo hello-from-$SANDBOX_SESSION", session_id=created.session_id)
    print(created.session_id, flush=True)
    sys.stdin.read()
    manager.close()
    """
)


class Server:
    """A separate process that owns one session (as an MCP server would)."""

    def __init__(self, env: dict[str, str], project: Path, name: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(project), name],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.session_id = read_line(self.proc.stdout).decode().strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=TIMEOUT_S)

    def crash(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=TIMEOUT_S)


@pytest.fixture
def server(cli_env: dict[str, str], workdir: Path) -> Iterator[Server]:
    srv = Server(cli_env, workdir, f"srv-{secrets.token_hex(3)}")
    yield srv
    srv.stop()


def test_ls_json_shows_a_session_of_another_server_process(
    cli_env: dict[str, str], server: Server, workdir: Path
) -> None:
    result = sandbox(cli_env, "ls", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert isinstance(rows, list)
    mine = [r for r in rows if r["session_id"] == server.session_id]
    assert len(mine) == 1
    row = mine[0]
    assert row["owner"] == OWNER
    assert row["project_path"] == str(workdir)
    assert row["status"] == "running"
    assert row["durable"] is False
    assert row["orphan"] is False
    assert row["name"].startswith("srv-")
    table = sandbox(cli_env, "ls")
    assert table.returncode == 0
    assert table.stdout.splitlines()[0].split() == [
        "SESSION",
        "NAME",
        "PROJECT",
        "AGE",
        "STATUS",
        "OWNER",
        "DURABLE",
    ]
    assert server.session_id in table.stdout


def test_logs_prints_the_session_log_and_follows_until_kill(
    cli_env: dict[str, str], server: Server, docker_client: docker.DockerClient
) -> None:
    result = sandbox(cli_env, "logs", server.session_id)
    assert result.returncode == 0, result.stderr
    assert f"hello-from-{server.session_id}" in result.stdout
    assert "__sb_" not in result.stdout  # the typed marker line shows as the command
    assert "echo hello-from-$SANDBOX_SESSION" in result.stdout

    follow = popen(cli_env, "logs", "-f", server.session_id[:6])
    try:
        assert b"hello-from" in read_line(follow.stdout)
        assert follow.poll() is None  # following
        killed = sandbox(cli_env, "kill", server.session_id)
        assert killed.returncode == 0, killed.stderr
        assert server.session_id in killed.stdout
        _, err = follow.communicate(timeout=TIMEOUT_S)
    finally:
        follow.kill()
    assert follow.returncode == 0, err
    assert _ours(docker_client, **{LABEL_SESSION: server.session_id}) == []


def test_kill_and_logs_of_an_unknown_session_fail_clearly(cli_env: dict[str, str]) -> None:
    for command in ("kill", "logs"):
        result = sandbox(cli_env, command, "nosuchsession")
        assert result.returncode == 1
        assert result.stderr.count("\n") == 1
        assert "nosuchsession" in result.stderr
        assert "hint:" in result.stderr


def test_gc_dry_run_lists_and_gc_removes_the_session_of_a_killed_server(
    cli_env: dict[str, str], workdir: Path, docker_client: docker.DockerClient
) -> None:
    srv = Server(cli_env, workdir, "orphan")
    srv.crash()  # SIGKILL: no cleanup ran, the container stays
    assert len(_ours(docker_client, **{LABEL_SESSION: srv.session_id})) == 1

    dry = sandbox(cli_env, "gc", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would remove" in dry.stdout
    assert srv.session_id in dry.stdout
    assert "its server is gone" in dry.stdout
    assert len(_ours(docker_client, **{LABEL_SESSION: srv.session_id})) == 1

    listed = json.loads(sandbox(cli_env, "ls", "--json").stdout)
    assert [r["orphan"] for r in listed if r["session_id"] == srv.session_id] == [True]

    real = sandbox(cli_env, "gc")
    assert real.returncode == 0, real.stderr
    assert srv.session_id in real.stdout
    assert "removed 1 orphaned container" in real.stdout
    assert _ours(docker_client, **{LABEL_SESSION: srv.session_id}) == []

    again = sandbox(cli_env, "gc")
    assert again.returncode == 0
    assert "nothing to remove" in again.stdout


def test_gc_leaves_the_sessions_of_a_live_server_alone(
    cli_env: dict[str, str], server: Server, docker_client: docker.DockerClient
) -> None:
    result = sandbox(cli_env, "gc")
    assert result.returncode == 0, result.stderr
    assert server.session_id not in result.stdout
    assert len(_ours(docker_client, **{LABEL_SESSION: server.session_id})) == 1


# -- doctor, image -------------------------------------------------------------------------------


def test_doctor_passes_on_this_machine(
    cli_env: dict[str, str], docker_client: docker.DockerClient
) -> None:
    result = sandbox(cli_env, "doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("engine answers", "API version", "session image", "memory limit enforced"):
        assert re.search(rf"^ok +{name}", result.stdout, re.MULTILINE), name
    assert "pids limit enforced" in result.stdout
    assert "CPU limit enforced" in result.stdout
    assert "user namespaces" in result.stdout
    assert "state directory writable" in result.stdout
    assert _ours(docker_client) == []  # the probe container is gone


def test_doctor_fails_clearly_without_an_engine(cli_env: dict[str, str]) -> None:
    env = {**cli_env, "DOCKER_HOST": "unix:///nonexistent.sock"}
    result = sandbox(env, "doctor")
    assert result.returncode == 1
    assert re.search(r"^FAIL +engine answers: .*nonexistent\.sock", result.stdout, re.MULTILINE)
    assert "fix: Start Docker" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_image_build_shows_progress(cli_env: dict[str, str]) -> None:
    result = sandbox(cli_env, "image", "build", timeout=900)
    assert result.returncode == 0, result.stderr
    assert "building sandbox-session:latest" in result.stderr
    assert "built sandbox-session:latest" in result.stderr


# -- shell, attach (through a pseudo-terminal) ---------------------------------------------------


def _in_pty(
    env: dict[str, str],
    args: list[str],
    cwd: Path,
    keys: bytes,
    expect: bytes,
    ready: bytes = b"",
    resize_to: tuple[int, int] | None = None,
) -> tuple[bytes, int]:
    """Run ``sandbox ARGS`` on a pty; once ``ready`` shows, resize the pty (``resize_to``)
    and type ``keys``; read until the process exits."""
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.chdir(cwd)
        os.execve(sys.executable, [sys.executable, "-m", "sandbox", *args], env)
    output = b""
    typed = not keys
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            ready_fds, _, _ = select.select([fd], [], [], 0.5)
            if ready_fds:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
            if not typed and ready in output:
                if resize_to is not None:  # the kernel sends SIGWINCH to the child
                    rows, cols = resize_to
                    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
                os.write(fd, keys)
                typed = True
        else:
            os.kill(pid, signal.SIGKILL)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert time.monotonic() < deadline, f"timed out; output so far: {output!r}"
    assert expect in output, output
    return output, os.waitstatus_to_exitcode(status)


def test_shell_runs_an_interactive_shell_on_a_terminal_and_cleans_up(
    cli_env: dict[str, str], workdir: Path, docker_client: docker.DockerClient
) -> None:
    output, code = _in_pty(
        cli_env,
        ["shell", "--project", str(workdir)],
        workdir,
        b"echo hi-from-shell; exit\r",
        b"hi-from-shell",
        ready=b"sandbox:",
    )
    assert code == 0
    assert output.count(b"hi-from-shell") >= 2  # the echo of the line, then its output
    assert re.search(rb"[\r\n]hi-from-shell\r\n", output)
    assert b"\x1b]777;sb;" not in output  # our markers never reach the terminal
    assert _ours(docker_client) == []


def test_shell_passes_the_shells_exit_code(
    cli_env: dict[str, str], workdir: Path, docker_client: docker.DockerClient
) -> None:
    _, code = _in_pty(
        cli_env, ["shell"], workdir, b"stty size; exit 7\r", b"24 80", ready=b"sandbox:"
    )
    assert code == 7
    assert _ours(docker_client) == []


def test_shell_follows_the_local_terminal_size(
    cli_env: dict[str, str], workdir: Path, docker_client: docker.DockerClient
) -> None:
    wait = 'for i in $(seq 50); do [ "$(stty size)" = "30 100" ] && break; sleep 0.1; done'
    _, code = _in_pty(
        cli_env,
        ["shell"],
        workdir,
        f"{wait}; echo size=$(stty size); exit\r".encode(),
        b"size=30 100",
        ready=b"sandbox:",
        resize_to=(30, 100),
    )
    assert code == 0
    assert _ours(docker_client) == []


def test_attach_opens_a_second_shell_in_a_running_session(
    cli_env: dict[str, str], server: Server, workdir: Path
) -> None:
    output, code = _in_pty(
        cli_env,
        ["attach", server.session_id],
        workdir,
        b"echo $SANDBOX_SESSION-$((6*7)); exit 3\r",
        f"{server.session_id}-42".encode(),
        ready=b"attached",
    )
    assert code == 3
    assert f"sandbox(attached):{WORKSPACE}".encode() in output
