"""The public Python API: what ``from sandbox import ...`` offers, sorted, complete and real."""

from __future__ import annotations

import subprocess
import sys

import pytest

import sandbox

EXPECTED = [
    "Backend",
    "CreateRequest",
    "DockerBackend",
    "EngineUnavailableError",
    "ExecResult",
    "FakeBackend",
    "ImageNotFoundError",
    "InvalidArgumentError",
    "Limits",
    "PathNotAllowedError",
    "ReadResult",
    "SandboxConfig",
    "SandboxError",
    "SendResult",
    "Session",
    "SessionBusyError",
    "SessionCreated",
    "SessionExitedError",
    "SessionInfo",
    "SessionLimitError",
    "SessionManager",
    "SessionNotFoundError",
    "SignalResult",
    "__version__",
]


def test_all_is_the_public_surface_and_sorted() -> None:
    assert sandbox.__all__ == EXPECTED  # a change here is a change of the public API
    assert sandbox.__all__ == sorted(sandbox.__all__)


def test_every_public_name_resolves_to_the_real_thing() -> None:
    from sandbox.session.manager import SessionManager

    for name in sandbox.__all__:
        assert getattr(sandbox, name) is not None, name
    assert sandbox.SessionManager is SessionManager
    assert issubclass(sandbox.SessionNotFoundError, sandbox.SandboxError)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="Nope"):
        sandbox.Nope  # type: ignore[attr-defined]  # noqa: B018


def test_importing_the_package_stays_cheap() -> None:
    """The CLI imports ``sandbox``: that alone must not pull in docker, pyte or the MCP SDK."""
    heavy = "('docker', 'pyte', 'mcp')"
    code = f"import sys, sandbox; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
