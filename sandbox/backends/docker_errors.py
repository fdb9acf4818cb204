"""Docker's exceptions, translated to ``SandboxError``s in exactly one place (``translate``),
and the retry of idempotent control-plane calls (inspect, list, remove, info) on connection
errors and 5xx (``retry_transient``); exec writes and container creation never are retried.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import docker
import docker.errors
import requests.exceptions
from tenacity import (
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from sandbox.errors import (
    EngineUnavailableError,
    ImageNotFoundError,
    InternalError,
    InvalidArgumentError,
    SandboxError,
    SessionNotFoundError,
)

P = ParamSpec("P")
T = TypeVar("T")


def translate(exc: BaseException, *, what: str = "") -> SandboxError:
    """The one place where docker / requests errors become ``SandboxError``s."""
    prefix = f"{what}: " if what else ""
    if isinstance(exc, SandboxError):
        return exc
    if isinstance(exc, docker.errors.ImageNotFound):
        return ImageNotFoundError(f"{prefix}image not found: {explain(exc)}")
    if isinstance(exc, docker.errors.NotFound):
        return SessionNotFoundError(f"{prefix}container not found: {explain(exc)}")
    if isinstance(exc, docker.errors.APIError):
        status = exc.status_code or 0
        if status == 409 and "is not running" in explain(exc):
            return SessionNotFoundError(f"{prefix}container is not running: {explain(exc)}")
        if 400 <= status < 500:
            return InvalidArgumentError(f"{prefix}the engine refused: {explain(exc)}")
        return EngineUnavailableError(
            f"{prefix}engine error {status}: {explain(exc)}", hint=refusal_hint(explain(exc))
        )
    if isinstance(
        exc,
        requests.exceptions.ConnectionError
        | requests.exceptions.Timeout
        | ConnectionError
        | socket.timeout
        | docker.errors.DockerException,
    ):
        return EngineUnavailableError(f"{prefix}the container engine does not answer: {exc}")
    return InternalError(f"{prefix}{type(exc).__name__}: {exc}")


def refusal_hint(explanation: str) -> str:
    """What to do when the engine answered but could not run the container (it is up: the
    connection is not the problem)."""
    text = explanation.lower()
    if "rlimit" in text:
        return (
            "The engine's default ulimits exceed this machine's hard limits (Podman: its "
            "defaults are above `ulimit -Hn`). Set default_ulimits in "
            '/etc/containers/containers.conf, e.g. ["nofile=20000:20000", "nproc=4096:4096"] '
            "with values at or below `ulimit -Hn` / `ulimit -Hu`, then restart the Podman "
            "service; `sandbox doctor` checks it."
        )
    if "catatonit" in text or "init binary" in text or "podman-init" in text:
        return (
            "Podman needs catatonit for a container's init (sessions run with --init): install "
            "it (Debian/Ubuntu: apt-get install catatonit; Fedora: dnf install catatonit)."
        )
    return (
        "The engine answered but could not run the container; its message above says why. "
        "`sandbox doctor` starts a container with the sessions' exact options and names the fix."
    )


def explain(exc: docker.errors.APIError) -> str:
    return str(exc.explanation or exc)


def transient(exc: BaseException) -> bool:
    """An error worth retrying an idempotent call for: a 5xx, a lost or slow connection."""
    if isinstance(exc, docker.errors.APIError):
        return (exc.status_code or 0) >= 500
    return isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout)


retry_transient = retry(
    retry=retry_if_exception(transient),
    stop=stop_after_attempt(4),
    wait=wait_exponential(multiplier=0.1, max=1.0),
    reraise=True,
)


def translated(what: str) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Decorate an engine call: what it raises becomes a ``SandboxError`` (``translate``)."""

    def deco(fn: Callable[P, T]) -> Callable[P, T]:
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            try:
                return fn(*args, **kwargs)
            except SandboxError:
                raise
            except Exception as exc:
                raise translate(exc, what=what) from exc

        wrapper.__name__ = fn.__name__
        wrapper.__doc__ = fn.__doc__
        return wrapper

    return deco
