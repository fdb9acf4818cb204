"""The pytest plugin's fixtures (``sandbox_server``, ``sandbox_session``) and the session handle
they give a test (see ``sandbox.testing``)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sandbox.testing.server import (
    OWNER_ENV,
    PROJECTS_ENV,
    SandboxServerContainer,
    SandboxToolError,
)


@dataclass
class SandboxSession:
    """A live session on a ``SandboxServerContainer``, on its own project directory."""

    server: SandboxServerContainer
    session_id: str
    project: Path
    created: dict[str, Any] = field(default_factory=dict)

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """Call ``tool`` with this session's id and ``arguments``."""
        return self.server.call(tool, {"session_id": self.session_id, **arguments})

    def execute(self, command: str, *, timeout_s: float = 30, **arguments: Any) -> dict[str, Any]:
        """Run ``command`` in the session's shell; the ``execute`` result (``output``,
        ``exit_code``, ``timed_out``, ...). A failing command is data, not an exception."""
        return self.call("execute", command=command, timeout_s=timeout_s, **arguments)

    def destroy(self) -> None:
        with contextlib.suppress(SandboxToolError):
            self.call("session_destroy", force=True)


@pytest.fixture(scope="session")
def sandbox_server() -> Iterator[SandboxServerContainer]:
    """One sandbox server for the test run (``SANDBOX_SERVER_IMAGE``, ``SANDBOX_PROJECTS``,
    ``SANDBOX_TESTING_OWNER``)."""
    with SandboxServerContainer(
        projects_dir=os.environ.get(PROJECTS_ENV) or None,
        owner=os.environ.get(OWNER_ENV) or None,
    ) as server:
        yield server


@pytest.fixture
def sandbox_session(
    sandbox_server: SandboxServerContainer, request: pytest.FixtureRequest
) -> Iterator[SandboxSession]:
    """A fresh session on a new project directory, destroyed (and the directory removed)
    after the test."""
    project = sandbox_server.make_project(request.node.name)
    try:
        created = sandbox_server.call("session_create", {"project_path": str(project)})
        session = SandboxSession(sandbox_server, str(created["session_id"]), project, created)
        try:
            yield session
        finally:
            session.destroy()
    finally:
        shutil.rmtree(project, ignore_errors=True)
