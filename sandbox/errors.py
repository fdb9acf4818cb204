"""The one exception tree of sandbox.

Every error a caller can see is a ``SandboxError`` that knows its contract code (the ``code``
field of an MCP error result) and a hint saying what to do next::

    SandboxError                                   INTERNAL
    ├── InvalidArgumentError (ValueError)          INVALID_ARGUMENT
    │   └── PathNotAllowedError (PermissionError)  PATH_NOT_ALLOWED
    ├── SessionError
    │   ├── SessionNotFoundError (LookupError)     SESSION_NOT_FOUND
    │   ├── SessionLimitError                      SESSION_LIMIT
    │   ├── SessionExitedError                     SESSION_EXITED
    │   └── SessionBusyError (TimeoutError)        SESSION_BUSY
    ├── EngineError
    │   ├── EngineUnavailableError (ConnectionError) ENGINE_UNAVAILABLE
    │   └── ImageNotFoundError (LookupError)       IMAGE_NOT_FOUND
    └── InternalError                              INTERNAL

A command that fails or times out is never an exception: it is data in ``ExecResult``.
Docker's own exceptions are translated in one place, ``sandbox.backends.docker_errors.translate``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

ErrorCode = Literal[
    "INVALID_ARGUMENT",
    "PATH_NOT_ALLOWED",
    "SESSION_NOT_FOUND",
    "SESSION_LIMIT",
    "SESSION_EXITED",
    "SESSION_BUSY",
    "ENGINE_UNAVAILABLE",
    "IMAGE_NOT_FOUND",
    "INTERNAL",
]


class SandboxError(Exception):
    """Root of every error sandbox raises on purpose."""

    code: ClassVar[ErrorCode] = "INTERNAL"
    default_hint: ClassVar[str] = "This is a bug in sandbox; the server log (stderr) has details."

    def __init__(self, message: str, *, hint: str | None = None, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint or self.default_hint
        self.context = context

    def to_dict(self) -> dict[str, str]:
        """The contract's error object: ``{"code", "message", "hint"}``."""
        return {"code": self.code, "message": self.message, "hint": self.hint}


class InvalidArgumentError(SandboxError, ValueError):
    code: ClassVar[ErrorCode] = "INVALID_ARGUMENT"
    default_hint: ClassVar[str] = "Check the argument against the tool's input schema."


class PathNotAllowedError(InvalidArgumentError, PermissionError):
    code: ClassVar[ErrorCode] = "PATH_NOT_ALLOWED"
    default_hint: ClassVar[str] = (
        "Pass an absolute path to an existing project directory under one of the allowed roots "
        "(SANDBOX_ALLOWED_ROOTS)."
    )


class SessionError(SandboxError):
    """Something about one session."""


class SessionNotFoundError(SessionError, LookupError):
    code: ClassVar[ErrorCode] = "SESSION_NOT_FOUND"
    default_hint: ClassVar[str] = (
        "Call session_list to see the live sessions, or session_create to start one."
    )


class SessionLimitError(SessionError):
    code: ClassVar[ErrorCode] = "SESSION_LIMIT"
    default_hint: ClassVar[str] = (
        "Destroy a session you no longer need (session_destroy), then try again."
    )


class SessionExitedError(SessionError):
    code: ClassVar[ErrorCode] = "SESSION_EXITED"
    default_hint: ClassVar[str] = (
        "The session's shell has exited (e.g. `exit`, `set -e`). Destroy it and create a new one."
    )


class SessionBusyError(SessionError, TimeoutError):
    code: ClassVar[ErrorCode] = "SESSION_BUSY"
    default_hint: ClassVar[str] = (
        "Another command is still running in this session. Wait for it with read, stop it with "
        "signal, or use another session."
    )


class EngineError(SandboxError):
    """The container engine misbehaved."""


class EngineUnavailableError(EngineError, ConnectionError):
    code: ClassVar[ErrorCode] = "ENGINE_UNAVAILABLE"
    default_hint: ClassVar[str] = (
        "Start Docker (Docker Desktop, Docker Engine or Podman's socket) or fix DOCKER_HOST; "
        "`sandbox doctor` checks the setup."
    )


class ImageNotFoundError(EngineError, LookupError):
    code: ClassVar[ErrorCode] = "IMAGE_NOT_FOUND"
    default_hint: ClassVar[str] = (
        "Build the session image with `sandbox image build`, or pass an existing image."
    )


class InternalError(SandboxError):
    code: ClassVar[ErrorCode] = "INTERNAL"


ERROR_CODES: tuple[ErrorCode, ...] = (
    "INVALID_ARGUMENT",
    "PATH_NOT_ALLOWED",
    "SESSION_NOT_FOUND",
    "SESSION_LIMIT",
    "SESSION_EXITED",
    "SESSION_BUSY",
    "ENGINE_UNAVAILABLE",
    "IMAGE_NOT_FOUND",
    "INTERNAL",
)
