"""Docker's errors become SandboxErrors in one place, and only transient ones are retried."""

from __future__ import annotations

import docker
import docker.errors
import pytest
import requests
import requests.exceptions

from sandbox.backends.docker import DockerBackend
from sandbox.backends.docker_errors import transient, translate
from sandbox.errors import (
    EngineUnavailableError,
    ImageNotFoundError,
    InternalError,
    InvalidArgumentError,
    SandboxError,
    SessionNotFoundError,
)


def _api_error(status: int, text: str = "boom") -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError(text, response=response, explanation=text)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (docker.errors.ImageNotFound("no image"), ImageNotFoundError),
        (docker.errors.NotFound("no container"), SessionNotFoundError),
        (_api_error(409, "container x is not running"), SessionNotFoundError),
        (_api_error(400), InvalidArgumentError),
        (_api_error(500), EngineUnavailableError),
        (_api_error(503), EngineUnavailableError),
        (requests.exceptions.ConnectionError("refused"), EngineUnavailableError),
        (requests.exceptions.ReadTimeout("slow"), EngineUnavailableError),
        (
            docker.errors.DockerException("Error while fetching server API version"),
            EngineUnavailableError,
        ),
        (RuntimeError("surprise"), InternalError),
    ],
)
def test_every_docker_error_is_mapped(exc: BaseException, expected: type[SandboxError]) -> None:
    translated = translate(exc, what="doing it")
    assert type(translated) is expected
    assert translated.message.startswith("doing it: ")
    assert translated.hint


@pytest.mark.parametrize(
    ("exc", "retried"),
    [
        (_api_error(500), True),
        (_api_error(502), True),
        (requests.exceptions.ConnectionError(), True),
        (_api_error(404), False),
        (_api_error(409), False),
        (docker.errors.NotFound("x"), False),
    ],
)
def test_only_transient_errors_are_retried(exc: BaseException, retried: bool) -> None:
    assert transient(exc) is retried


def test_unreachable_engine_is_engine_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(EngineUnavailableError) as info:
        DockerBackend()
    assert info.value.code == "ENGINE_UNAVAILABLE"
    assert "DOCKER_HOST" in info.value.hint
    client = docker.DockerClient(
        base_url="unix:///nonexistent/docker.sock", version="1.41", timeout=2
    )
    with pytest.raises(EngineUnavailableError):
        DockerBackend(client).describe()


def test_a_lazy_backend_starts_without_an_engine_and_fails_each_use_clearly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What `sandbox mcp` uses: the server starts before Docker and answers ENGINE_UNAVAILABLE."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    backend = DockerBackend(lazy=True)
    for _ in range(2):  # not cached: a later use connects once the engine is up
        with pytest.raises(EngineUnavailableError) as info:
            backend.describe()
        assert "DOCKER_HOST" in info.value.hint
