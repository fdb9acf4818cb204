"""sandbox: the terminal AI agents get when they must not touch the host.

The public Python API (everything else is internal and may move)::

    from sandbox import CreateRequest, SandboxConfig, SessionManager

    manager = SessionManager(SandboxConfig.from_env())
    created = manager.create(CreateRequest(project_path="."))
    print(manager.execute("ls", session_id=created.session_id).output)
    manager.close()

Names are imported on first use, so ``import sandbox`` (and the CLI) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sandbox.version import __version__

if TYPE_CHECKING:
    from sandbox.backends.base import Backend
    from sandbox.backends.docker import DockerBackend
    from sandbox.backends.fake import FakeBackend
    from sandbox.config import SandboxConfig
    from sandbox.errors import (
        EngineUnavailableError,
        ImageNotFoundError,
        InvalidArgumentError,
        PathNotAllowedError,
        SandboxError,
        SessionBusyError,
        SessionExitedError,
        SessionLimitError,
        SessionNotFoundError,
    )
    from sandbox.models import (
        CreateRequest,
        ExecResult,
        Limits,
        ReadResult,
        SendResult,
        SessionCreated,
        SessionInfo,
        SignalResult,
    )
    from sandbox.session.manager import SessionManager
    from sandbox.session.session import Session

_WHERE = {
    "Backend": "sandbox.backends.base",
    "CreateRequest": "sandbox.models",
    "DockerBackend": "sandbox.backends.docker",
    "EngineUnavailableError": "sandbox.errors",
    "ExecResult": "sandbox.models",
    "FakeBackend": "sandbox.backends.fake",
    "ImageNotFoundError": "sandbox.errors",
    "InvalidArgumentError": "sandbox.errors",
    "Limits": "sandbox.models",
    "PathNotAllowedError": "sandbox.errors",
    "ReadResult": "sandbox.models",
    "SandboxConfig": "sandbox.config",
    "SandboxError": "sandbox.errors",
    "SendResult": "sandbox.models",
    "Session": "sandbox.session.session",
    "SessionBusyError": "sandbox.errors",
    "SessionCreated": "sandbox.models",
    "SessionExitedError": "sandbox.errors",
    "SessionInfo": "sandbox.models",
    "SessionLimitError": "sandbox.errors",
    "SessionManager": "sandbox.session.manager",
    "SessionNotFoundError": "sandbox.errors",
    "SignalResult": "sandbox.models",
}

__all__ = [
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


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'sandbox' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
