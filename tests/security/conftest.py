"""Adversarial suite fixtures: a real engine, and managers whose containers carry this run's
``sec-<random>`` owner label (removed by it at the end; a leak fails the run).

The engine-facing tests run once per runtime in ``RUNTIMES``: runc always, gVisor (``runsc``)
where the engine has it registered, skipped with the reason otherwise. The integration
fixtures are reused (``docker_client`` fails instead of skipping under
SANDBOX_REQUIRE_DOCKER=1).
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from sandbox.backends.docker import DockerBackend
from sandbox.config import LABEL_OWNER, SandboxConfig
from sandbox.models import CreateRequest
from sandbox.session.manager import SessionManager
from sandbox.session.session import Session
from tests.conftest import make_project
from tests.integration.conftest import *  # noqa: F403  (docker_client, manager, make_config)
from tests.integration.conftest import make_config

SEC_OWNER = f"sec-{secrets.token_hex(4)}"
RUNTIMES = ("runc", "runsc")

# Tight limits, so exhausting them is quick; every case of the suite runs under them.
TIGHT: dict[str, Any] = {
    "memory_mb": 256,
    "pids": 96,
    "cpus": 1.0,
    "tmp_mb": 24,
    "home_mb": 12,
    "fsize_mb": 8,
    "log_max_bytes": 4 * 1024 * 1024,
    "max_lifetime_s": 900,
    "idle_ttl_s": 0,
    "record": False,
}


def sec_config(root: Path, runtime: str | None = None, **overrides: Any) -> SandboxConfig:
    values: dict[str, Any] = {**TIGHT, "owner": SEC_OWNER, "runtime": runtime}
    values.update(overrides)
    return make_config(root, **values)


@pytest.fixture(scope="session")
def engine(docker_client: object) -> Iterator[docker.DockerClient]:
    assert isinstance(docker_client, docker.DockerClient)
    yield docker_client
    mine = {"label": f"{LABEL_OWNER}={SEC_OWNER}"}
    leaked = docker_client.containers.list(all=True, filters=mine)
    for container in leaked:
        with contextlib.suppress(docker.errors.APIError):
            container.remove(force=True)
    assert not leaked, f"containers left behind: {[c.name for c in leaked]}"


@pytest.fixture(scope="session", params=RUNTIMES)
def runtime(request: pytest.FixtureRequest, engine: docker.DockerClient) -> str | None:
    """None for the engine's default (runc); "runsc" only where it is registered."""
    name = str(request.param)
    if name == "runc":
        return None
    registered = DockerBackend(engine).describe().runtimes  # Podman: the one it runs with
    if name not in registered:
        pytest.skip(
            f"the engine has no {name!r} runtime registered (it has: {', '.join(registered)}); "
            "`sandbox doctor` says how to register gVisor"
        )
    return name


@pytest.fixture(scope="session")
def sec_manager(
    runtime: str | None, engine: docker.DockerClient, allowed_root: Path
) -> Iterator[SessionManager]:
    mgr = SessionManager(sec_config(allowed_root, runtime))
    yield mgr
    mgr.close()


@pytest.fixture
def sec_project() -> Iterator[Path]:
    path = make_project("sec")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def open_session(manager: SessionManager, project: Path, **request: Any) -> Iterator[Session]:
    created = manager.create(CreateRequest(project_path=str(project), **request))
    try:
        yield manager.get(created.session_id)
    finally:
        with contextlib.suppress(Exception):
            manager.destroy(created.session_id, force=True)


@pytest.fixture
def fresh(sec_manager: SessionManager, sec_project: Path) -> Iterator[Session]:
    """A session of its own, for a case that damages it."""
    with open_session(sec_manager, sec_project) as session:
        yield session


@pytest.fixture(scope="module")
def shared(sec_manager: SessionManager) -> Iterator[Session]:
    """One session for the read-only probes of a module."""
    project = make_project("sec-shared")
    with open_session(sec_manager, project) as session:
        yield session
    shutil.rmtree(project, ignore_errors=True)
