"""Whoever owns the project, the session can work in it as the host expects, and says so up front
when it cannot.

The same file-writing scenario runs for a project of a normal user and one of root (CI jobs in
containers, dev containers, a team server running as root): the shell runs as the owner (root
without any capability), and what it makes belongs to the owner on the host. A project the
shell cannot write is reported by ``session_create`` (``project_writable``, ``notices``) and by
``sandbox run`` before the first ``Permission denied``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.models import CreateRequest
from sandbox.session.manager import SessionManager
from tests.conftest import make_project
from tests.integration.conftest import make_config

pytestmark = pytest.mark.docker

SCENARIO = """set -e
echo made > new-file
mkdir -p new-dir/sub && echo deep > new-dir/sub/file
echo edited >> existing
git init -q repo 2>/dev/null || mkdir -p repo/.git
cat existing
id -u; id -g
"""


@pytest.fixture(params=[(1234, 2345), (0, 0)], ids=["user-owned", "root-owned"])
def owned(request: pytest.FixtureRequest) -> tuple[Path, int, int]:
    uid, gid = request.param
    path = make_project("owner", owner=(uid, gid))
    (path / "existing").write_text("original\n")
    os.chown(path / "existing", uid, gid)
    return path, uid, gid


def test_the_same_edits_work_and_belong_to_the_owner(
    manager: SessionManager, owned: tuple[Path, int, int]
) -> None:
    project, uid, gid = owned
    created = manager.create(CreateRequest(project_path=str(project)))
    try:
        assert created.project_writable is True
        assert created.notices == []
        result = manager.execute(SCENARIO, session_id=created.session_id, timeout_s=30)
        assert result.exit_code == 0, result.output
        assert result.output == f"original\nedited\n{uid}\n{gid}\n"
        for made in ("new-file", "new-dir", "new-dir/sub/file", "existing", "repo"):
            st = (project / made).stat()
            assert (st.st_uid, st.st_gid) == (uid, gid), made
        assert (project / "new-dir/sub/file").read_text() == "deep\n"
    finally:
        manager.destroy(created.session_id, force=True)


def test_a_root_shell_has_no_capability_and_gains_nothing_from_being_root(
    manager: SessionManager,
) -> None:
    project = make_project("rootcaps", owner=(0, 0))
    secret = project / "someone-elses"
    secret.write_text("secret\n")
    os.chown(secret, 1234, 1234)
    secret.chmod(0o600)
    created = manager.create(CreateRequest(project_path=str(project)))
    try:
        checks = manager.execute(
            "id -u; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs)' /proc/self/status;"
            "cat someone-elses 2>/dev/null || echo read-refused;"
            "touch mine && chown 1234 mine 2>/dev/null || echo chown-refused;"
            "kill -0 1 2>/dev/null || echo signal-refused;"
            "touch /usr/x 2>/dev/null || echo rootfs-refused;"
            "mount -t tmpfs t /mnt 2>/dev/null || echo mount-refused",
            session_id=created.session_id,
            timeout_s=30,
        )
        lines = checks.output.splitlines()
        assert lines[0] == "0"
        caps = dict(line.split(":\t") for line in lines[1:7])
        assert caps == {
            "CapInh": "0000000000000000",
            "CapPrm": "0000000000000000",
            "CapEff": "0000000000000000",
            "CapBnd": "0000000000000000",
            "CapAmb": "0000000000000000",
            "NoNewPrivs": "1",
        }
        assert lines[7:] == [
            "read-refused",
            "chown-refused",
            "signal-refused",
            "rootfs-refused",
            "mount-refused",
        ]
    finally:
        manager.destroy(created.session_id, force=True)


def test_read_only_project_is_reported_not_writable(manager: SessionManager) -> None:
    project = make_project("readonly")
    created = manager.create(CreateRequest(project_path=str(project), read_only_project=True))
    try:
        assert created.project_writable is False
        assert created.notices == []  # as asked: nothing to fix
        info = manager.info(created.session_id)
        assert info.project_writable is False
    finally:
        manager.destroy(created.session_id, force=True)


def test_a_project_the_shell_cannot_write_is_said_up_front_with_the_fix(
    docker_client: object, allowed_root: Path
) -> None:
    project = make_project("rootonly", owner=(0, 0))
    manager = SessionManager(make_config(allowed_root, root_shell=False))
    try:
        created = manager.create(CreateRequest(project_path=str(project)))
        assert created.project_writable is False
        [notice] = created.notices
        assert str(project) in notice
        assert "SANDBOX_ROOT_SHELL" in notice
        result = manager.execute("touch x", session_id=created.session_id, timeout_s=30)
        assert result.exit_code != 0  # what the notice warned of
    finally:
        manager.close()


def test_sandbox_run_says_so_on_stderr_before_the_command(
    allowed_root: Path, tmp_path: Path
) -> None:
    project = make_project("runnote", owner=(0, 0))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_")}
    env.update(SANDBOX_STATE_DIR=str(tmp_path / "state"), SANDBOX_ROOT_SHELL="0")
    done = subprocess.run(
        [sys.executable, "-m", "sandbox", "run", "--project", str(project), "--", "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"sandbox: note: {project} is not writable from this session" in done.stderr
    assert "SANDBOX_ROOT_SHELL" in done.stderr
