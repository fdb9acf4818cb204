"""The warm pool on the fake backend: handed out once, refilled, keyed, cleaned."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.backends.fake import FakeBackend
from sandbox.config import SandboxConfig
from sandbox.models import CreateRequest
from sandbox.session.manager import SessionManager


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "proj").mkdir()
    (tmp_path / "other").mkdir()
    return tmp_path


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
def manager(root: Path, backend: FakeBackend) -> Iterator[SessionManager]:
    config = SandboxConfig(state_dir=root / "state", allowed_roots=(root,), warm_pool=2)
    mgr = SessionManager(config, backend)
    yield mgr
    mgr.close()


def _pooled(manager: SessionManager) -> int:
    assert manager._pool is not None
    return manager._pool.count()


def _wait_pooled(manager: SessionManager, n: int) -> None:
    deadline = time.monotonic() + 20
    while _pooled(manager) != n:
        assert time.monotonic() < deadline, f"pool has {_pooled(manager)}, expected {n}"
        time.sleep(0.02)


def test_the_second_create_is_served_warm_and_the_pool_refills(
    manager: SessionManager, root: Path, backend: FakeBackend
) -> None:
    first = manager.create(CreateRequest(project_path=str(root / "proj")))
    _wait_pooled(manager, 2)
    ready = {c for c in backend.containers if c != first.container_id}
    second = manager.create(CreateRequest(project_path=str(root / "proj"), rows=30, cols=100))
    assert second.container_id in ready  # handed out, not built
    assert (second.rows, second.cols) == (30, 100)
    session = manager.get(second.session_id)
    assert session.execute("stty size; echo $SANDBOX_SESSION", timeout_s=5).output == (
        f"30 100\n{second.session_id}\n"
    )
    _wait_pooled(manager, 2)


def test_a_warm_session_is_never_handed_out_twice(manager: SessionManager, root: Path) -> None:
    manager.create(CreateRequest(project_path=str(root / "proj")))
    _wait_pooled(manager, 2)
    ids = {
        manager.create(CreateRequest(project_path=str(root / "proj"))).session_id for _ in range(4)
    }
    assert len(ids) == 4


def test_a_different_request_is_not_served_from_another_kind(
    manager: SessionManager, root: Path, backend: FakeBackend
) -> None:
    manager.create(CreateRequest(project_path=str(root / "proj")))
    _wait_pooled(manager, 2)
    ready = set(backend.containers)
    other = manager.create(CreateRequest(project_path=str(root / "other")))
    assert other.container_id not in ready
    named = manager.create(CreateRequest(project_path=str(root / "proj"), name="special"))
    assert named.container_id not in ready
    assert named.name == "special"


def test_close_removes_pooled_containers(root: Path, backend: FakeBackend) -> None:
    config = SandboxConfig(state_dir=root / "s2", allowed_roots=(root,), warm_pool=3)
    mgr = SessionManager(config, backend)
    mgr.create(CreateRequest(project_path=str(root / "proj")))
    _wait_pooled(mgr, 3)
    mgr.close()
    assert backend.containers == {}


def test_a_pooled_session_that_died_is_replaced(
    manager: SessionManager, root: Path, backend: FakeBackend
) -> None:
    manager.create(CreateRequest(project_path=str(root / "proj")))
    _wait_pooled(manager, 2)
    assert manager._pool is not None
    for queue in manager._pool._ready.values():
        for session in queue:
            backend.kill(session.container_id)  # killed from outside while waiting
    created = manager.create(CreateRequest(project_path=str(root / "proj")))
    assert manager.execute("echo alive", session_id=created.session_id).output == "alive\n"
