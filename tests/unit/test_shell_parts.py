"""A session's parts without the ``Session`` facade, on the fake backend (bash on a host pty):
the link opens a shell and its reader feeds the tracker; recovery replaces the shell; process
control waits for a command and sees what is in front of the shell."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.backends.base import ContainerSpec, Mount
from sandbox.backends.fake import FakeBackend
from sandbox.config import DEFAULT_IMAGE
from sandbox.errors import SessionExitedError
from sandbox.models import Limits
from sandbox.session.display import Display
from sandbox.session.process_control import ProcessControl
from sandbox.session.recovery import ShellRecovery
from sandbox.session.shell_link import ShellLink
from sandbox.session.spec import SessionSpec, now_iso
from sandbox.shell.markers import command_line
from sandbox.shell.tracker import Pending
from sandbox.terminal.rawlog import RawLog


@pytest.fixture
def link(tmp_path: Path) -> Iterator[ShellLink]:
    backend = FakeBackend()
    project = tmp_path / "proj"
    project.mkdir()
    cid = backend.create(
        ContainerSpec(
            image=DEFAULT_IMAGE,
            name="parts",
            labels={},
            mounts=(Mount(str(project), "/workspace"),),
            command=("sleep", "infinity"),
            user=f"{os.getuid()}:{os.getgid()}",
            memory_mb=256,
            cpus=1.0,
            pids=256,
            network="none",
            tmpfs={},
        )
    )
    spec = SessionSpec(
        session_id="parts",
        name="parts",
        image=DEFAULT_IMAGE,
        project_path=str(project),
        workdir="/workspace",
        rows=24,
        cols=80,
        network=False,
        durable=False,
        limits=Limits(memory_mb=256, cpus=1.0, pids=256),
        created_at=now_iso(),
        read_only_project=False,
        command=None,
        user=f"{os.getuid()}:{os.getgid()}",
    )
    log = RawLog(tmp_path / "raw.log", max_bytes=1 << 20)
    display = Display(log, 24, 80)
    shell = ShellLink(
        spec, backend=backend, container_id=cid, log=log, display=display, recording=None
    )
    shell.open_shell()
    yield shell
    shell.close()
    backend.remove(cid)


def type_command(link: ShellLink, command: str) -> Pending:
    channel = link.require_alive()
    with link.cond:
        link.cond.wait_for(lambda: link.tracker.prompt_seen, 5)
        p = link.tracker.begin("c0ffee", sent_offset=link.log.size, display=b"")
    channel.write(command_line(command, p.nonce))
    return p


def test_the_link_opens_a_shell_whose_markers_reach_the_tracker(link: ShellLink) -> None:
    assert link.alive
    assert link.tracker.shell_pid is not None
    p = type_command(link, "echo parts; (exit 6)")
    with link.cond:
        assert link.cond.wait_for(lambda: p.finished, 5)
    assert p.exit_code == 6
    assert p.start is not None
    assert p.end is not None
    assert b"parts" in link.log.read(p.start, p.end)


def test_recovery_replaces_the_shell_and_ends_the_command_it_held(link: ShellLink) -> None:
    recovery = ShellRecovery(link)
    control = ProcessControl(link, recovery)
    first = link.tracker.shell_pid
    p = type_command(link, "sleep 30")
    assert not control.wait_done(0.2)  # it runs
    assert recovery.respawn()
    assert p.finished
    assert p.exit_code is None
    assert link.alive
    assert link.tracker.shell_pid not in (None, first)
    assert recovery.shell_restarts == 1
    assert control.wait_done(0.1)  # nothing runs in the new shell


def test_a_detached_link_is_no_longer_alive_and_says_so(link: ShellLink) -> None:
    link.detach()
    assert not link.alive
    assert link.wait_ended(1)
    with pytest.raises(SessionExitedError, match="has exited"):
        link.require_alive()
